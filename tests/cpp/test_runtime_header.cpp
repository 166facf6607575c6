// Standalone test of mkpy/include/mkpy_metal.h (the kernel runtime header).
// Build: clang++ -std=c++17 -O2 -Wall -I mkpy/include tests/cpp/test_runtime_header.cpp
// Exit status is the number of failed checks (capped); each failure is printed.
#include "mkpy_metal.h"

#include <stdio.h>
#include <string.h>

static int g_fail = 0, g_checks = 0;

#define CHECK(cond)                                                        \
  do {                                                                     \
    ++g_checks;                                                            \
    if (!(cond)) {                                                         \
      ++g_fail;                                                            \
      printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);               \
    }                                                                      \
  } while (0)

// bit-exact float comparison (distinguishes -0/+0; any NaN equals any NaN)
static bool same(float a, float b) {
  if (a != a) return b != b;
  return metal::_mk::f2u(a) == metal::_mk::f2u(b);
}
#define CHECK_F(a, b)                                                                      \
  do {                                                                                     \
    ++g_checks;                                                                            \
    float a_ = float(a), b_ = float(b);                                                    \
    if (!same(a_, b_)) {                                                                   \
      ++g_fail;                                                                            \
      printf("FAIL %s:%d: %s == %s  (%.9g [0x%08x] vs %.9g [0x%08x])\n", __FILE__, __LINE__, \
             #a, #b, a_, metal::_mk::f2u(a_), b_, metal::_mk::f2u(b_));                    \
    }                                                                                      \
  } while (0)
#define CHECK_H(a, bits_)                                                                  \
  do {                                                                                     \
    ++g_checks;                                                                            \
    unsigned got_ = (a).bits;                                                              \
    if (got_ != unsigned(bits_)) {                                                         \
      ++g_fail;                                                                            \
      printf("FAIL %s:%d: %s has bits 0x%04x, expected 0x%04x\n", __FILE__, __LINE__, #a,  \
             got_, unsigned(bits_));                                                       \
    }                                                                                      \
  } while (0)

// distance in units in the last place between two finite floats
static long ulps(float a, float b) {
  int32_t ia = int32_t(metal::_mk::f2u(a)), ib = int32_t(metal::_mk::f2u(b));
  if (ia < 0) ia = int32_t(0x80000000u - uint32_t(ia));
  if (ib < 0) ib = int32_t(0x80000000u - uint32_t(ib));
  long d = long(ia) - long(ib);
  return d < 0 ? -d : d;
}
#define CHECK_ULP(a, b, n)                                                               \
  do {                                                                                   \
    ++g_checks;                                                                          \
    float a_ = float(a), b_ = float(b);                                                  \
    if (!(ulps(a_, b_) <= (n))) {                                                        \
      ++g_fail;                                                                          \
      printf("FAIL %s:%d: %s ~ %s within %d ulp (%.9g vs %.9g)\n", __FILE__, __LINE__, #a, \
             #b, int(n), a_, b_);                                                        \
    }                                                                                    \
  } while (0)

template <class A, class B>
static bool veq(const A& a, const B& b) {
  using V = typename metal::_mk::vun<A>::type;
  V x(a), y(b);
  for (int i = 0; i < V::size; ++i)
    if (!same(float(x[i]), float(y[i]))) return false;
  return true;
}

static const float kInf = __builtin_huge_valf();
static const float kNaN = __builtin_nanf("");

// ---------------------------------------------------------------------------
// compile-time checks: types, sizes, result types
// ---------------------------------------------------------------------------
using std::is_same;
#define SAME_T(...) static_assert(is_same<__VA_ARGS__>::value, #__VA_ARGS__)

SAME_T(decltype(half() + half()), half);
SAME_T(decltype(half() - half()), half);
SAME_T(decltype(half() * half()), half);
SAME_T(decltype(half() / half()), half);
SAME_T(decltype(half() + 1.0f), float);
SAME_T(decltype(1.0f + half()), float);
SAME_T(decltype(half() * 2.0), float);  // Metal has no double: float literal semantics
SAME_T(decltype(half() + 1), half);
SAME_T(decltype(2u * half()), half);
SAME_T(decltype(bfloat() + bfloat()), bfloat);
SAME_T(decltype(bfloat() + 1), bfloat);
SAME_T(decltype(bfloat() + 1.0f), float);
SAME_T(decltype(bfloat() + half()), float);
SAME_T(decltype(half() < 1.0f), bool);
SAME_T(decltype(-half()), half);
SAME_T(float16_t, half);
SAME_T(bfloat16_t, bfloat);
SAME_T(uint, unsigned int);
SAME_T(ushort, unsigned short);
SAME_T(uchar, unsigned char);
SAME_T(ulong, unsigned long);
static_assert(sizeof(ulong) == 8 && sizeof(long) == 8, "64-bit long");
SAME_T(int64_t, long);
SAME_T(size_t, ulong);

static_assert(sizeof(half) == 2 && alignof(half) == 2, "");
static_assert(sizeof(bfloat) == 2 && alignof(bfloat) == 2, "");
static_assert(std::is_trivially_copyable<half>::value, "");
static_assert(std::is_trivially_copyable<bfloat>::value, "");
#define SIZE_ALIGN(T, s, a) static_assert(sizeof(T) == s && alignof(T) == a, #T " size/align")
SIZE_ALIGN(float2, 8, 8);
SIZE_ALIGN(float3, 16, 16);
SIZE_ALIGN(float4, 16, 16);
SIZE_ALIGN(half2, 4, 4);
SIZE_ALIGN(half3, 8, 8);
SIZE_ALIGN(half4, 8, 8);
SIZE_ALIGN(bfloat3, 8, 8);
SIZE_ALIGN(int3, 16, 16);
SIZE_ALIGN(uint2, 8, 8);
SIZE_ALIGN(char3, 4, 4);
SIZE_ALIGN(uchar4, 4, 4);
SIZE_ALIGN(short3, 8, 8);
SIZE_ALIGN(bool2, 2, 2);
SIZE_ALIGN(bool3, 4, 4);
SIZE_ALIGN(long2, 16, 16);
SIZE_ALIGN(long3, 32, 32);
SIZE_ALIGN(ulong4, 32, 32);
SIZE_ALIGN(packed_float2, 8, 4);
SIZE_ALIGN(packed_float3, 12, 4);
SIZE_ALIGN(packed_float4, 16, 4);
SIZE_ALIGN(packed_half3, 6, 2);
SIZE_ALIGN(packed_half4, 8, 2);
SIZE_ALIGN(packed_uchar3, 3, 1);
static_assert(std::is_trivially_copy_constructible<float4>::value, "");
static_assert(std::is_trivially_destructible<float4>::value, "");
static_assert(std::is_trivially_default_constructible<float4>::value, "");
static_assert(std::is_standard_layout<float4>::value, "");
SAME_T(vec<float, 4>, float4);
SAME_T(vec<half, 2>, half2);
SAME_T(vec<bool, 3>, bool3);
SAME_T(vec<ulong, 2>, ulong2);
SAME_T(vec<int64_t, 2>, long2);

// vector expression result types
SAME_T(decltype(float4() + float4()), float4);
SAME_T(decltype(float4() * 2.0f), float4);
SAME_T(decltype(2 * float4()), float4);
SAME_T(decltype(half4() * 2.0f), half4);
SAME_T(decltype(float4() < float4()), bool4);
SAME_T(decltype(int3() == 0), bool3);
SAME_T(decltype(!bool2()), bool2);
SAME_T(decltype(bool2() && bool2()), bool2);
SAME_T(decltype(+float4().xy), float2);
SAME_T(decltype(float4().xy * float4().zw), float2);
SAME_T(decltype(float4().zyx + 1.0f), float3);
SAME_T(decltype(packed_float3() * 2.0f), float3);
SAME_T(decltype(uint4() >> 1), uint4);

// math result types and overload resolution
SAME_T(decltype(metal::exp(half())), half);
SAME_T(decltype(metal::exp(bfloat())), bfloat);
SAME_T(decltype(metal::exp(1.0f)), float);
SAME_T(decltype(metal::exp(2)), float);
SAME_T(decltype(metal::fast::exp(float4())), float4);
SAME_T(decltype(metal::precise::exp(half2())), half2);
SAME_T(decltype(exp(float4().xyz)), float3);
SAME_T(decltype(max(1.0f, 0.0f)), float);
SAME_T(decltype(max(half(), 0.0f)), float);
SAME_T(decltype(max(half(), half())), half);
SAME_T(decltype(max(half(), 0)), half);
SAME_T(decltype(min(1, 3)), int);
SAME_T(decltype(min(1u, 3)), uint);
SAME_T(decltype(min(short(1), short(3))), short);
SAME_T(decltype(abs(-3)), int);
SAME_T(decltype(abs(-3.0f)), float);
SAME_T(decltype(clamp(half(), half(0), half(1))), half);
SAME_T(decltype(clamp(1.0f, 0, 1)), float);
SAME_T(decltype(clamp(float4(), 0.0f, 1.0f)), float4);
SAME_T(decltype(clamp(int2(), 0, 1)), int2);
SAME_T(decltype(max(float4(), 0.0f)), float4);
SAME_T(decltype(mix(float3(), float3(), 0.5f)), float3);
SAME_T(decltype(pow(2.0f, 3)), float);
SAME_T(decltype(isnan(float4())), bool4);
SAME_T(decltype(isnan(half())), bool);
SAME_T(decltype(signbit(half3())), bool3);
SAME_T(decltype(ilogb(float2())), int2);
SAME_T(decltype(dot(float4(), float4())), float);
SAME_T(decltype(dot(half4(), half4())), half);
SAME_T(decltype(length(float3())), float);
SAME_T(decltype(normalize(half3())), half3);
SAME_T(decltype(cross(float3(), float3())), float3);
SAME_T(decltype(select(float4(), float4(), bool4())), float4);
SAME_T(decltype(select(1.0f, 2.0f, true)), float);
SAME_T(decltype(popcount(uint4())), uint4);
SAME_T(decltype(as_type<uint>(1.0f)), uint);
SAME_T(decltype(as_type<half2>(1.0f)), half2);
SAME_T(decltype(erf(1.0f)), float);
SAME_T(decltype(erf(half())), half);
SAME_T(decltype(elem_to_loc(uint(0), (const int*)0, (const int64_t*)0, 1)), uint);
SAME_T(decltype(elem_to_loc<int64_t>(uint(0), (const int*)0, (const int64_t*)0, 1)), int64_t);
SAME_T(decltype(elem_to_loc(int64_t(0), (const int*)0, (const int64_t*)0, 1)), int64_t);
SAME_T(decltype(elem_to_loc(uint3(), (const int*)0, (const int64_t*)0, 1)), int64_t);
SAME_T(decltype(ceildiv(7, 2)), int);
SAME_T(decltype(Limits<half>::max), const half);

// type traits
static_assert(is_floating_point_v<half> && is_floating_point_v<bfloat> && is_floating_point_v<float>, "");
static_assert(!is_floating_point_v<int>, "");
static_assert(is_arithmetic_v<half> && is_signed_v<half> && is_scalar_v<bfloat>, "");
static_assert(is_vector_v<float4> && !is_vector_v<float>, "");
static_assert(is_same_v<make_unsigned_t<int>, uint>, "");

// constexpr-ness of what MLX needs at compile time
constexpr half kHalfOne = half(1.0f);
static_assert(kHalfOne.bits == 0x3c00, "");
static_assert(half(65520.0f).bits == 0x7c00, "");
static_assert(bfloat(1.0f).bits == 0x3f80, "");
constexpr float4 kVec = float4(1, 2, 3, 4);
static_assert(kVec[3] == 4.0f, "");
static_assert(as_type<uint>(1.0f) == 0x3f800000u, "");
static_assert(Limits<float>::max == __builtin_huge_valf(), "");
static_assert(Limits<int>::min == INT_MIN && Limits<uint8_t>::max == 255, "");

// ---------------------------------------------------------------------------
// half / bfloat
// fma on half/bfloat against an exact reference: a*b + c is formed exactly as
// N * 2^-S in 128-bit integers and rounded to nearest even with P significant
// bits and minimum normal exponent EMIN.
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd() {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return uint32_t(g_rng >> 11);
}
static __int128 scaled(float f, int S) {  // f * 2^S, exact for the values used
  int e = 0;
  float m = __builtin_frexpf(f, &e);  // f = m * 2^e, m has <= 24 bits
  __int128 im = __int128(__builtin_ldexpf(m, 24));
  int sh = e - 24 + S;
  return sh >= 0 ? im << sh : im >> -sh;  // the tests keep sh >= 0 or drop only zeros
}
static float round_ref(__int128 N, int S, int P, int EMIN) {
  bool neg = N < 0;
  unsigned __int128 M = neg ? (unsigned __int128)(-N) : (unsigned __int128)N;
  if (M == 0) return 0.0f;
  int p = 127;
  while (!((M >> p) & 1)) --p;
  int q = p - S - (P - 1);
  if (q < EMIN - (P - 1)) q = EMIN - (P - 1);
  int shift = q + S;
  unsigned __int128 R;
  if (shift <= 0) {
    R = M << -shift;
  } else {
    R = M >> shift;
    unsigned __int128 rem = M & ((((unsigned __int128)1) << shift) - 1), hw = ((unsigned __int128)1) << (shift - 1);
    if (rem > hw || (rem == hw && (R & 1))) ++R;
  }
  float v = __builtin_ldexpf(float((uint64_t)R), q);
  return neg ? -v : v;
}
template <class H>
static void test_fma16(const char* name, int P, int EMIN, int S, uint16_t lo, uint16_t hi) {
  int bad = 0;
  for (int it = 0; it < 200000; ++it) {
    H a = H::from_bits(uint16_t(lo + rnd() % (hi - lo)) | uint16_t(rnd() & 0x8000u));
    H b = H::from_bits(uint16_t(lo + rnd() % (hi - lo)) | uint16_t(rnd() & 0x8000u));
    H c = H::from_bits(uint16_t(lo + rnd() % (hi - lo)) | uint16_t(rnd() & 0x8000u));
    __int128 N = scaled(float(a), S / 2) * scaled(float(b), S / 2) + scaled(float(c), S);
    float ref = round_ref(N, S, P, EMIN);
    H got = metal::fma(a, b, c);
    if (!(float(got) == float(H(ref)))) {
      if (bad < 5)
        printf("%s fma(0x%04x, 0x%04x, 0x%04x) = 0x%04x, expected 0x%04x\n", name, a.bits, b.bits,
               c.bits, got.bits, H(ref).bits);
      ++bad;
    }
  }
  CHECK(bad == 0);
}

// ---------------------------------------------------------------------------
template <class H>
static void test_rounding16(const char* name, float maxfinite) {
  // every finite value round-trips; for every pair of neighbours the exact
  // midpoint ties to even and the floats just off it go to the nearer one
  int bad = 0;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    H h = H::from_bits(uint16_t(b));
    float f = float(h);
    if (f != f) {
      H r = H(f);
      if (!(float(r) != float(r))) ++bad;
      continue;
    }
    if (H(f).bits != h.bits) ++bad;
    if (f == kInf || f == -kInf) continue;
    if (b == 0x7fffu || b == 0xffffu) continue;
    H n = H::from_bits(uint16_t(b + 1));  // next magnitude
    float g = float(n);
    if (g != g) continue;
    float mid = f + (g - f) * 0.5f;  // exact in float
    if (g == kInf || g == -kInf) mid = f + (f - float(H::from_bits(uint16_t(b - 1)))) * 0.5f;
    uint16_t even = (b & 1u) ? uint16_t(b + 1) : uint16_t(b);
    if (H(mid).bits != even) ++bad;
    float below = __builtin_nextafterf(mid, f), above = __builtin_nextafterf(mid, g);
    if (H(below).bits != h.bits) ++bad;
    if (H(above).bits != n.bits) ++bad;
  }
  if (bad) printf("%s rounding: %d mismatches\n", name, bad);
  CHECK(bad == 0);
  CHECK_F(float(H(maxfinite)), maxfinite);
}

static void test_half() {
  test_rounding16<half>("half", 65504.0f);
  test_rounding16<bfloat>("bfloat", 3.38953139e38f);
  test_fma16<half>("half", 11, -14, 48, 0x0001, 0x7c00);     // all finite halves
  test_fma16<bfloat>("bfloat", 8, -126, 56, 0x3580, 0x4980);  // 2^-20 .. 2^20

  // known values
  CHECK_H(half(65520.0f), 0x7c00);       // rounds up to inf (tie to even)
  CHECK_H(half(65519.996f), 0x7bff);
  CHECK_H(half(-65520.0f), 0xfc00);
  CHECK_H(half(65504.0f), 0x7bff);
  CHECK_H(half(1e-8f), 0x0000);          // below 2^-25: zero
  CHECK_H(half(-1e-8f), 0x8000);         // negative zero
  CHECK_H(half(2.98023224e-8f), 0x0000); // exactly 2^-25 ties to even (0)
  CHECK_H(half(2.99e-8f), 0x0001);       // just above: smallest subnormal
  CHECK_H(half(5.96046448e-8f), 0x0001);
  CHECK_H(half(8.94069672e-8f), 0x0002); // 1.5 * 2^-24 ties to even (2)
  CHECK_H(half(6.09755516e-5f), 0x03ff); // largest subnormal
  CHECK_H(half(6.10351562e-5f), 0x0400); // smallest normal
  CHECK_H(half(1.0f), 0x3c00);
  CHECK_H(half(1.00048828f), 0x3c00);    // 1 + 2^-11: tie to even
  CHECK_H(half(1.00048840f), 0x3c01);
  CHECK_H(half(0.1f), 0x2e66);
  CHECK_H(half(kInf), 0x7c00);
  CHECK_H(half(-kInf), 0xfc00);
  CHECK_H(half(-0.0f), 0x8000);
  CHECK((half(kNaN).bits & 0x7fffu) > 0x7c00u);
  CHECK((half(kNaN).bits & 0x0200u) != 0);
  CHECK(half(2049) == half(2048.0f));    // int converts to half (rounding) first
  CHECK_F(float(half::from_bits(0x0001)), 5.96046448e-8f);
  CHECK_F(float(half::from_bits(0x8000)), -0.0f);
  CHECK_F(float(half::from_bits(0x7c00)), kInf);
  CHECK_F(float(half::from_bits(0xfbff)), -65504.0f);
  CHECK(float(half::from_bits(0x7e00)) != float(half::from_bits(0x7e00)));

  // software path agrees with F16C (when compiled with -mf16c) on a sample
  // of all floats and exhaustively on halves
  {
    int bad = 0;
    for (uint32_t b = 0; b < 0x10000u; ++b) {
      float a = metal::_mk::f16_to_f32_sw(uint16_t(b)), c = float(half::from_bits(uint16_t(b)));
      if (metal::_mk::f2u(a) != metal::_mk::f2u(c)) ++bad;
    }
    for (uint64_t u = 0; u < 0x100000000ull; u += 4093) {
      float f = metal::_mk::u2f(uint32_t(u));
      if (metal::_mk::f32_to_f16_sw(f) != half(f).bits) ++bad;
    }
    CHECK(bad == 0);
  }

  CHECK_H(bfloat(1.0f), 0x3f80);
  CHECK_H(bfloat(1.00390625f), 0x3f80);  // 1 + 2^-8: tie to even
  CHECK_H(bfloat(1.01171875f), 0x3f82);  // 1 + 3 * 2^-8: tie to even (up)
  CHECK_H(bfloat(3.40282347e38f), 0x7f80);  // FLT_MAX rounds to inf
  CHECK_H(bfloat(-kInf), 0xff80);
  CHECK((bfloat(kNaN).bits & 0x7fffu) > 0x7f80u);
  CHECK_H(bfloat(1e-40f), 0x0001);       // float subnormals keep their top bits
  CHECK_F(float(bfloat(3)), 3.0f);

  // arithmetic: computed in float, rounded once
  half a = half(1.0f), b = half(0.0004882812f);  // 2^-11
  CHECK_H(a + b, 0x3c00);  // 1 + 2^-11 ties to even
  CHECK_H(a + b + b, 0x3c00);
  CHECK_H(a + (b + b), 0x3c01);
  CHECK_F(a + 0.5f, 1.5f);  // float result
  CHECK_H(half(3.0f) / half(7.0f), 0x36db);
  CHECK_H(half(65504.0f) * half(2.0f), 0x7c00);
  CHECK_H(-half(0.0f), 0x8000);
  CHECK_H(half(1.0f) - 1, 0x0000);
  CHECK_H(2 * half(1.5f), 0x4200);
  half c = half(1.0f);
  c += 1;
  CHECK_H(c, 0x4000);
  c *= 1.5f;
  CHECK_H(c, 0x4200);
  c -= half(0.5f);
  CHECK_H(c, 0x4100);
  c /= 2;
  CHECK_H(c, 0x3d00);
  ++c;
  CHECK_H(c, 0x4080);
  c--;
  CHECK_H(c, 0x3d00);
  CHECK(half(1.0f) < half(2.0f) && half(2.0f) >= 2 && half(1.0f) == 1.0f && half(1.0f) != 2);
  CHECK(!(half(kNaN) == half(kNaN)));
  float fsum = 1.0f;
  fsum += half(0.5f);
  CHECK_F(fsum, 1.5f);
  int ih = half(2.75f);
  CHECK(ih == 2);
  half hz = 0;  // implicit from int
  CHECK_H(hz, 0x0000);
  bfloat bz = 0;  // integers convert implicitly to bfloat
  CHECK_H(bz, 0x0000);
  bfloat bb = bfloat(1.5f);
  bb += 1;
  CHECK_F(bb, 2.5f);
  CHECK_H(bfloat(1.0f) + bfloat(0.00390625f), 0x3f80);  // 1 + 2^-8 ties to even
  CHECK_H(half(bfloat(1.5f)), 0x3e00);
  CHECK_H(bfloat(half(1.5f)), 0x3fc0);
}

// ---------------------------------------------------------------------------
// vectors
// ---------------------------------------------------------------------------
static float3 take3(float3 v) { return v; }

static void test_vectors() {
  // constructors
  float4 z = float4();
  CHECK(veq(z, float4(0, 0, 0, 0)));
  float4 s(2.0f);
  CHECK(s.x == 2 && s.y == 2 && s.z == 2 && s.w == 2);
  float4 v(1, 2, 3, 4);
  CHECK(v.x == 1 && v.y == 2 && v.z == 3 && v.w == 4);
  CHECK(v.r == 1 && v.g == 2 && v.b == 3 && v.a == 4);
  CHECK(v[0] == 1 && v[3] == 4);
  float4 a(v.xy, 0, 1);
  CHECK(veq(a, float4(1, 2, 0, 1)));
  float4 a2(0, v.xy, 1);
  CHECK(veq(a2, float4(0, 1, 2, 1)));
  float4 a3(v.zw, v.xy);
  CHECK(veq(a3, float4(3, 4, 1, 2)));
  float3 v3(5, 6, 7);
  float4 b(v3, 8);
  CHECK(veq(b, float4(5, 6, 7, 8)));
  float4 b2(0.5f, v3);
  CHECK(veq(b2, float4(0.5f, 5, 6, 7)));
  float3 c(v.xyz);
  CHECK(veq(c, float3(1, 2, 3)));
  float3 c2 = v.wzy;
  CHECK(veq(c2, float3(4, 3, 2)));
  float2 d = {7, 8};
  CHECK(d.x == 7 && d.y == 8);
  uint2 u2 = {1u, 2u};
  CHECK(u2.y == 2u);
  int4 iv = int4(v);  // explicit conversion
  CHECK(iv.x == 1 && iv.w == 4);
  float4 fv = float4(int4(-1, 2, -3, 4));
  CHECK(veq(fv, float4(-1, 2, -3, 4)));
  half4 hv = half4(float4(1.5f, 65520.0f, -0.0f, 0.1f));
  CHECK(hv.x.bits == 0x3e00 && hv.y.bits == 0x7c00 && hv.z.bits == 0x8000 && hv.w.bits == 0x2e66);
  float4 back = float4(hv);
  CHECK_F(back.x, 1.5f);
  float2 fh = float2(hv.xy);  // swizzle of another element type
  CHECK_F(fh.x, 1.5f);
  float4 splat_int = 3;  // implicit scalar -> vector
  CHECK(veq(splat_int, float4(3)));
  bool4 bv(true, false, true, false);
  CHECK(bv.x && !bv.y);
  uint3 gid(10, 20, 30);
  CHECK(gid.x == 10 && gid.z == 30);
  vec<float, 4> tv(1.0f, 2.0f, 3.0f, 4.0f);
  CHECK(veq(tv, v));
  CHECK(veq(take3(v.xyz), float3(1, 2, 3)));  // swizzle passed to a float3 parameter
  constexpr float4 cv(1, 2, 3, 4);
  static_assert(cv[1] == 2.0f, "constexpr vector");

  // swizzle reads
  CHECK(veq(v.xy, float2(1, 2)));
  CHECK(veq(v.yx, float2(2, 1)));
  CHECK(veq(v.zyx, float3(3, 2, 1)));
  CHECK(veq(v.xxxx, float4(1)));
  CHECK(veq(v.wzyx, float4(4, 3, 2, 1)));
  CHECK(veq(v.bgra, float4(3, 2, 1, 4)));
  CHECK(veq(v.rgb, float3(1, 2, 3)));
  CHECK(veq(v.aa, float2(4, 4)));
  CHECK(veq(d.yxy, float3(8, 7, 8)));   // 3-component swizzle of a float2
  CHECK(veq(d.xyxy, float4(7, 8, 7, 8)));
  CHECK(veq(v3.zzz, float3(7)));
  CHECK((+v.zw)[1] == 4 && (+v.zyx)[2] == 1);  // indexing a swizzle: materialize it
  CHECK(veq(v.xy + v.zw, float2(4, 6)));
  CHECK(veq(v.xy * 2.0f, float2(2, 4)));
  CHECK(veq(2.0f * v.xy, float2(2, 4)));
  CHECK(veq(-v.xy, float2(-1, -2)));
  CHECK(all(v.xy < v.zw));
  CHECK(dot(v.xy, v.zw) == 11.0f);

  // materializing a swizzle with unary plus (chained access, auto, ?:)
  CHECK((+v.xyz).z == 3 && (+v.wzyx).x == 4);
  CHECK(veq((+v.xyzw).zyx, float3(3, 2, 1)));
  auto mat = +v.yz;
  SAME_T(decltype(mat), float2);
  CHECK(mat.x == 2 && mat.y == 3);
  CHECK(veq(v.x > 0 ? +v.xy : +v.zw, float2(1, 2)));
  CHECK(veq(v.x < 0 ? v.xy : float2(9), float2(9)));  // swizzle vs vector needs no plus
  auto prox = v.zw;  // a proxy copy still works in expressions
  CHECK(veq(prox * 2.0f, float2(6, 8)));

  // swizzle writes
  float4 w(1, 2, 3, 4);
  w.xy = float2(9, 8);
  CHECK(veq(w, float4(9, 8, 3, 4)));
  w.zw += float2(10, 20);
  CHECK(veq(w, float4(9, 8, 13, 24)));
  w.xy = w.yx;  // reads before writing
  CHECK(veq(w, float4(8, 9, 13, 24)));
  w.wzyx = w;
  CHECK(veq(w, float4(24, 13, 9, 8)));
  w.bgr = float3(1, 2, 3);
  CHECK(veq(w, float4(3, 2, 1, 8)));
  w.xz = 0.5f;  // scalar splat
  CHECK(veq(w, float4(0.5f, 2, 0.5f, 8)));
  w.yw *= 2;
  CHECK(veq(w, float4(0.5f, 4, 0.5f, 16)));
  w.x = 7;
  w.a -= 1;
  CHECK(veq(w, float4(7, 4, 0.5f, 15)));
  w.xy = {1, 2};
  CHECK(veq(w, float4(1, 2, 0.5f, 15)));
  float4 w2(0);
  w2.zw = w.xy;  // proxy = proxy of another type
  CHECK(veq(w2, float4(0, 0, 1, 2)));
  float4 w3(0);
  w3.xy = w2.zw;
  w3.zw = w3.xy;  // same proxy type on both sides of another object
  CHECK(veq(w3, float4(1, 2, 1, 2)));
  w3.xy = w3.xy;
  CHECK(veq(w3, float4(1, 2, 1, 2)));
  const float4 cw(5, 6, 7, 8);
  w3.yz = cw.xy;  // const source
  CHECK(veq(w3, float4(1, 5, 6, 2)));
  uint3 g3(1, 2, 3);
  g3.xy = g3.yx + 1u;
  CHECK(g3.x == 3 && g3.y == 2 && g3.z == 3);

  // component-wise arithmetic
  float4 p(1, 2, 3, 4), q(4, 3, 2, 1);
  CHECK(veq(p + q, float4(5)));
  CHECK(veq(p - q, float4(-3, -1, 1, 3)));
  CHECK(veq(p * q, float4(4, 6, 6, 4)));
  CHECK(veq(p / q, float4(0.25f, 2.0f / 3.0f, 1.5f, 4)));
  CHECK(veq(p * 2, float4(2, 4, 6, 8)));
  CHECK(veq(1.0f - p, float4(0, -1, -2, -3)));
  CHECK(veq(-p, float4(-1, -2, -3, -4)));
  CHECK(veq(-float2(0.0f, -0.0f), float2(-0.0f, 0.0f)));
  float4 acc(0);
  acc += p;
  acc *= 2.0f;
  acc -= 1;
  acc /= float4(1, 1, 1, 5);
  CHECK(veq(acc, float4(1, 3, 5, 1.4f)));
  ++acc;
  CHECK(veq(acc, float4(2, 4, 6, 2.4f)));
  int4 i(7, -7, 9, -9), j(2, 2, -4, -4);
  CHECK(all(i / j == int4(3, -3, -2, 2)));
  CHECK(all(i % j == int4(1, -1, 1, -1)));
  CHECK(all(int4(5, INT_MIN, 7, INT_MIN) / int4(0, -1, -1, 2) == int4(0, INT_MIN, -7, INT_MIN / 2)));
  CHECK(all(int4(5, INT_MIN, 7, -7) % int4(0, -1, -1, 0) == int4(0)));
  CHECK(all(uint2(5, 9) / uint2(0, 2) == uint2(0, 4)));
  CHECK(all((i & 3) == int4(3, 1, 1, 3)));
  CHECK(all((i | 8) == int4(15, -7, 9, -1)));
  CHECK(all((i ^ j) == int4(5, -5, -11, 11)));
  CHECK(all(~int2(0, -1) == int2(-1, 0)));
  CHECK(all((uint2(1, 0x80000000u) << 1u) == uint2(2, 0)));
  CHECK(all((uint2(1, 2) << uint2(33, 32)) == uint2(2, 2)));  // counts mod 32
  CHECK(all((int2(-8, 8) >> 1) == int2(-4, 4)));
  CHECK(all((int2(INT_MAX, INT_MIN) + 1) == int2(INT_MIN, INT_MIN + 1)));  // wraps
  CHECK(all(-int2(INT_MIN, 1) == int2(INT_MIN, -1)));
  CHECK(all((uchar2(250, 3) + uchar(10)) == uchar2(4, 13)));
  CHECK(all((char2(127, -128) + char(1)) == char2(-128, -127)));
  int4 ic(1, 2, 3, 4);
  ic <<= 2;
  ic >>= 1;
  ic %= 3;
  CHECK(all(ic == int4(2, 1, 0, 2)));
  half4 h4(1, 2, 3, 4);
  half4 h5 = h4 * half(0.5f) + 1;
  CHECK(h5.x.bits == 0x3e00 && h5.w.bits == 0x4200);
  bfloat2 bf2 = bfloat2(1, 2) * bfloat(3);
  CHECK_F(bf2.y, 6.0f);

  // comparisons and logic
  bool4 lt = p < q;
  CHECK(lt.x && lt.y && !lt.z && !lt.w);
  CHECK(all((p <= q) == bool4(true, true, false, false)));
  CHECK(all((p > 2.5f) == bool4(false, false, true, true)));
  CHECK(all((p >= 2) == bool4(false, true, true, true)));
  CHECK(all((p == float4(1, 0, 3, 0)) == bool4(true, false, true, false)));
  CHECK(all((p != 2) == bool4(true, false, true, true)));
  CHECK(all((float2(kNaN, 1) == float2(kNaN, 1)) == bool2(false, true)));
  bool4 m1(true, true, false, false), m2(true, false, true, false);
  CHECK(all((m1 && m2) == bool4(true, false, false, false)));
  CHECK(all((m1 || m2) == bool4(true, true, true, false)));
  CHECK(all(!m1 == bool4(false, false, true, true)));
  CHECK(any(m1) && !all(m1) && all(bool2(true)) && !any(bool3(false)));
  CHECK(all(true) && !any(false));

  // packed vectors
  packed_float3 pk(1, 2, 3);
  float3 up = pk;
  CHECK(veq(up, float3(1, 2, 3)));
  pk = float3(4, 5, 6);
  CHECK(pk.x == 4 && pk[2] == 6);
  CHECK(veq(pk.zy, float2(6, 5)));
  pk.xy = float2(0, 1);
  CHECK(veq(pk * 2.0f, float3(0, 2, 12)));
  packed_float3 arr[2] = {float3(1, 2, 3), float3(4, 5, 6)};
  CHECK(reinterpret_cast<const float*>(arr)[3] == 4.0f);  // no padding
  float4 from_packed = float4(packed_float4(1, 2, 3, 4));
  CHECK(veq(from_packed, float4(1, 2, 3, 4)));
  packed_half4 ph = half4(1, 2, 3, 4);
  CHECK(ph.w.bits == 0x4400);
}

// ---------------------------------------------------------------------------
// as_type
// ---------------------------------------------------------------------------
static void test_as_type() {
  CHECK(as_type<uint>(1.0f) == 0x3f800000u);
  CHECK_F(as_type<float>(0x40490fdbu), 3.14159274f);
  CHECK(as_type<int>(-0.0f) == INT_MIN);
  CHECK(as_type<ushort>(half(1.0f)) == 0x3c00);
  CHECK(as_type<half>(ushort(0x3c00)).bits == 0x3c00);
  CHECK(as_type<uint16_t>(bfloat(2.0f)) == 0x4000);
  half2 h2 = as_type<half2>(0x40003c00u);
  CHECK(h2.x.bits == 0x3c00 && h2.y.bits == 0x4000);
  CHECK(as_type<uint>(half2(half(1.0f), half(2.0f))) == 0x40003c00u);
  uint2 u = as_type<uint2>(1.0);  // double is 8 bytes
  CHECK(u.y == 0x3ff00000u && u.x == 0u);
  CHECK(as_type<uint64_t>(uint2(1, 2)) == 0x0000000200000001ull);
  float4 f = as_type<float4>(uint4(0x3f800000u, 0x40000000u, 0, 0x80000000u));
  CHECK(veq(f, float4(1, 2, 0, -0.0f)));
  float4 v(1, 2, 3, 4);
  CHECK(as_type<uint64_t>(v.zw) == ((uint64_t(0x40800000u) << 32) | 0x40400000u));
  CHECK(as_type<uchar4>(0x04030201u).w == 4);
  CHECK(as_type<uint4>(float3(1, 2, 3)).z == 0x40400000u);  // float3 is 16 bytes
  CHECK(bfloat16_to_uint16(bfloat(1.0f)) == 0x3f80 && uint16_to_bfloat16(0x4000).bits == 0x4000);
}

// ---------------------------------------------------------------------------
// math
// ---------------------------------------------------------------------------
static void test_math() {
  // exact cases and IEEE specials
  CHECK_F(metal::exp(0.0f), 1.0f);
  CHECK_F(metal::exp(-kInf), 0.0f);
  CHECK_F(metal::exp(kInf), kInf);
  CHECK_F(metal::exp(kNaN), kNaN);
  CHECK_F(metal::exp(-200.0f), 0.0f);
  CHECK_F(metal::exp(100.0f), kInf);
  CHECK_ULP(metal::exp(1.0f), 2.71828183f, 1);
  CHECK_F(metal::exp2(10.0f), 1024.0f);
  CHECK_F(metal::exp2(-1.0f), 0.5f);
  CHECK_F(metal::exp10(3.0f), 1000.0f);
  CHECK_F(metal::exp10(-1.0f), 0.1f);
  CHECK_F(metal::log(1.0f), 0.0f);
  CHECK_F(metal::log(0.0f), -kInf);
  CHECK_F(metal::log(-1.0f), kNaN);
  CHECK_F(metal::log(kInf), kInf);
  CHECK_ULP(metal::log(2.0f), 0.693147181f, 1);
  CHECK_F(metal::log2(8.0f), 3.0f);
  CHECK_F(metal::log10(1000.0f), 3.0f);
  CHECK_F(metal::sqrt(4.0f), 2.0f);
  CHECK_F(metal::sqrt(2.0f), 1.41421354f);
  CHECK_F(metal::sqrt(-1.0f), kNaN);
  CHECK_F(metal::sqrt(-0.0f), -0.0f);
  CHECK_F(metal::rsqrt(4.0f), 0.5f);
  CHECK_F(metal::rsqrt(0.0f), kInf);
  CHECK_F(metal::rsqrt(kInf), 0.0f);
  CHECK_ULP(metal::rsqrt(2.0f), 0.707106781f, 1);
  CHECK_F(metal::sin(0.0f), 0.0f);
  CHECK_F(metal::sin(-0.0f), -0.0f);
  CHECK_F(metal::sin(kInf), kNaN);
  CHECK_F(metal::cos(0.0f), 1.0f);
  CHECK_ULP(metal::sin(1.0f), 0.841470985f, 1);
  CHECK_ULP(metal::cos(1.0f), 0.540302306f, 1);
  CHECK_ULP(metal::tan(1.0f), 1.55740772f, 1);
  CHECK_F(metal::sinpi(0.5f), 1.0f);
  CHECK_F(metal::sinpi(1.0f), 0.0f);
  CHECK_F(metal::sinpi(-1.0f), -0.0f);
  CHECK_F(metal::sinpi(2.0f), 0.0f);
  CHECK_F(metal::sinpi(-0.5f), -1.0f);
  CHECK_F(metal::sinpi(1.5f), -1.0f);
  CHECK_F(metal::sinpi(0.25f), 0.707106769f);
  CHECK_F(metal::sinpi(1e30f), 0.0f);
  CHECK_F(metal::sinpi(kInf), kNaN);
  CHECK_F(metal::cospi(0.0f), 1.0f);
  CHECK_F(metal::cospi(0.5f), 0.0f);
  CHECK_F(metal::cospi(1.5f), 0.0f);
  CHECK_F(metal::cospi(1.0f), -1.0f);
  CHECK_F(metal::cospi(-2.0f), 1.0f);
  CHECK_F(metal::cospi(1.0f / 3.0f), 0.49999997f);  // float(1/3) is a bit above 1/3
  CHECK_F(metal::tanpi(0.25f), 1.0f);
  CHECK_F(metal::tanpi(-0.25f), -1.0f);
  CHECK_F(metal::tanpi(0.0f), 0.0f);
  CHECK_F(metal::tanpi(0.5f), kInf);
  CHECK_F(metal::tanpi(1.0f), -0.0f);
  CHECK_F(metal::asin(1.0f), 1.57079637f);
  CHECK_F(metal::acos(1.0f), 0.0f);
  CHECK_F(metal::acos(-1.0f), 3.14159274f);
  CHECK_F(metal::atan(kInf), 1.57079637f);
  CHECK_F(metal::atan2(0.0f, -1.0f), 3.14159274f);
  CHECK_F(metal::atan2(-0.0f, -1.0f), -3.14159274f);
  CHECK_F(metal::atan2(1.0f, 0.0f), 1.57079637f);
  CHECK_F(metal::sinh(0.0f), 0.0f);
  CHECK_F(metal::cosh(0.0f), 1.0f);
  CHECK_F(metal::tanh(kInf), 1.0f);
  CHECK_F(metal::tanh(-kInf), -1.0f);
  CHECK_F(metal::asinh(0.0f), 0.0f);
  CHECK_F(metal::acosh(1.0f), 0.0f);
  CHECK_F(metal::atanh(1.0f), kInf);
  CHECK_ULP(metal::tanh(0.5f), 0.462117157f, 1);
  CHECK_F(metal::pow(2.0f, 10.0f), 1024.0f);
  CHECK_F(metal::pow(2.0f, 3), 8.0f);
  CHECK_F(metal::pow(-2.0f, 3.0f), -8.0f);
  CHECK_F(metal::pow(0.0f, 0.0f), 1.0f);
  CHECK_F(metal::pow(-1.0f, 0.5f), kNaN);
  CHECK_F(metal::powr(2.0f, 0.5f), 1.41421354f);
  CHECK_F(metal::powr(-2.0f, 2.0f), kNaN);
  CHECK_F(metal::erf(0.0f), 0.0f);
  CHECK_F(metal::erf(kInf), 1.0f);
  CHECK_ULP(metal::erf(0.5f), 0.520499877f, 1);

  // rounding functions
  CHECK_F(metal::floor(-1.5f), -2.0f);
  CHECK_F(metal::ceil(-1.5f), -1.0f);
  CHECK_F(metal::ceil(-0.5f), -0.0f);
  CHECK_F(metal::trunc(-1.7f), -1.0f);
  CHECK_F(metal::round(2.5f), 3.0f);
  CHECK_F(metal::round(-2.5f), -3.0f);
  CHECK_F(metal::rint(2.5f), 2.0f);
  CHECK_F(metal::rint(3.5f), 4.0f);
  CHECK_F(metal::rint(-0.5f), -0.0f);
  CHECK_F(metal::fract(1.25f), 0.25f);
  CHECK_F(metal::fract(-1.25f), 0.75f);
  CHECK_F(metal::fract(-1e-10f), 0.99999994f);  // clamped below 1
  CHECK_F(metal::fract(-0.0f), -0.0f);
  CHECK_F(metal::fract(kInf), 0.0f);
  CHECK_F(metal::fract(kNaN), kNaN);
  CHECK_H(metal::fract(half(-0.0001f)), 0x3bff);  // below 1 after rounding to half
  CHECK_F(metal::fmod(5.5f, 2.0f), 1.5f);
  CHECK_F(metal::fmod(-5.5f, 2.0f), -1.5f);
  CHECK_F(metal::fmod(1.0f, 0.0f), kNaN);
  {
    float ip = 0;
    CHECK_F(metal::modf(-3.75f, ip), -0.75f);
    CHECK_F(ip, -3.0f);
    int e = 0;
    CHECK_F(metal::frexp(8.0f, e), 0.5f);
    CHECK(e == 4);
    half hip;
    CHECK_H(metal::modf(half(2.5f), hip), 0x3800);
    CHECK_H(hip, 0x4000);
    CHECK_H(metal::frexp(half(-3.0f), e), 0xba00);
    CHECK(e == 2);
    float c = 0;
    CHECK_F(metal::sincos(0.0f, c), 0.0f);
    CHECK_F(c, 1.0f);
    float4 cv;
    float4 sv = metal::sincos(float4(0), cv);
    CHECK(veq(sv, float4(0)) && veq(cv, float4(1)));
    int4 ev;
    float4 mv = metal::frexp(float4(1, 2, 3, 0.25f), ev);
    CHECK(veq(mv, float4(0.5f, 0.5f, 0.75f, 0.5f)) && all(ev == int4(1, 2, 2, -1)));
  }
  CHECK_F(metal::ldexp(1.5f, 3), 12.0f);
  CHECK_F(metal::ldexp(1.0f, -149), 1.40129846e-45f);
  CHECK_H(metal::ldexp(half(1.0f), -24), 0x0001);
  CHECK_H(metal::ldexp(half(1.0f), 16), 0x7c00);
  CHECK(veq(metal::ldexp(float2(1, 2), 2), float2(4, 8)));
  CHECK(metal::ilogb(8.0f) == 3 && metal::ilogb(0.75f) == -1);
  CHECK(metal::ilogb(half::from_bits(0x0001)) == -24);
  CHECK_F(metal::copysign(2.0f, -0.0f), -2.0f);
  CHECK_F(metal::fdim(5.0f, 3.0f), 2.0f);
  CHECK_F(metal::fdim(3.0f, 5.0f), 0.0f);
  CHECK_F(metal::nextafter(1.0f, 2.0f), 1.00000012f);
  CHECK_F(metal::nextafter(0.0f, -1.0f), -1.40129846e-45f);
  CHECK_H(metal::nextafter(half(1.0f), half(2.0f)), 0x3c01);
  CHECK_H(metal::nextafter(half(1.0f), half(0.0f)), 0x3bff);
  CHECK_H(metal::nextafter(half(0.0f), half(-1.0f)), 0x8001);
  CHECK_H(metal::nextafter(half(-1.0f), half(-2.0f)), 0xbc01);
  CHECK_H(metal::nextafter(bfloat(1.0f), bfloat(2.0f)), 0x3f81);
  CHECK_F(metal::divide(1.0f, 4.0f), 0.25f);
  CHECK_F(metal::fast::divide(1.0f, 0.0f), kInf);
  CHECK_F(metal::fma(2.0f, 3.0f, 1.0f), 7.0f);
  CHECK_F(metal::fma(1.00000012f, 1.00000012f, -1.00000024f), 1.42108547e-14f);  // fused
  // half fma: (1 + 2^-10)^2 - 1 = 2^-9 + 2^-20, a tie that goes to even
  CHECK_H(metal::fma(half::from_bits(0x3c01), half::from_bits(0x3c01), half(-1.0f)), 0x1800);
  CHECK_H(metal::fma(half(1.0f), half(1.0f), half::from_bits(0x1000)), 0x3c00);  // 1 + 2^-11: tie to even
  CHECK_H(metal::fma(half::from_bits(0x3c01), half(1.0f), half::from_bits(0x1000)), 0x3c02);
  CHECK_H(metal::fma(half(1.0f), half::from_bits(0x1000), half::from_bits(0x3c00)), 0x3c00);

  // max / min / fmax / fmin: NaN loses
  CHECK_F(metal::max(1.0f, kNaN), 1.0f);
  CHECK_F(metal::max(kNaN, 1.0f), 1.0f);
  CHECK_F(metal::fmax(kNaN, -1.0f), -1.0f);
  CHECK_F(metal::min(kNaN, 3.0f), 3.0f);
  CHECK_F(metal::fmin(2.0f, kNaN), 2.0f);
  CHECK_F(metal::max(2.0f, 0.0f), 2.0f);
  CHECK_F(metal::max(-2.0f, 0), 0.0f);
  CHECK(metal::min(5, 3) == 3 && metal::max(-5, 3) == 3 && metal::max(7u, 3) == 7u);
  CHECK(metal::min(-1, 0u) == 0u);  // usual arithmetic conversions: unsigned
  CHECK_H(metal::max(half(1.0f), half(2.0f)), 0x4000);
  CHECK_F(metal::max(half(1.0f), 3.0f), 3.0f);
  CHECK_H(metal::max(half(1.0f), 3), 0x4200);
  CHECK_F(metal::max3(1.0f, 5.0f, 3.0f), 5.0f);
  CHECK_F(metal::min3(1.0f, 5.0f, 3.0f), 1.0f);
  CHECK_F(metal::median3(1.0f, 5.0f, 3.0f), 3.0f);
  CHECK_F(metal::fmedian3(9.0f, 5.0f, 3.0f), 5.0f);
  CHECK(metal::median3(4, 1, 9) == 4);
  CHECK(veq(metal::max(float4(1, kNaN, -3, 4), 0.0f), float4(1, 0, 0, 4)));
  CHECK(veq(metal::fmin(float2(1, 5), float2(3, kNaN)), float2(1, 5)));

  // abs
  CHECK(metal::abs(-3) == 3);
  CHECK(metal::abs(INT_MIN) == INT_MIN);
  CHECK_F(metal::abs(-0.0f), 0.0f);
  CHECK_F(metal::fabs(-kInf), kInf);
  CHECK_H(metal::abs(half(-2.0f)), 0x4000);
  CHECK(all(metal::abs(int3(-1, 2, -3)) == int3(1, 2, 3)));
  CHECK(veq(metal::abs(float2(-1.5f, 2)), float2(1.5f, 2)));

  // classification
  CHECK(metal::isnan(kNaN) && !metal::isnan(kInf) && !metal::isnan(1.0f));
  CHECK(metal::isinf(-kInf) && !metal::isinf(kNaN) && !metal::isinf(FLT_MAX));
  CHECK(metal::isfinite(FLT_MAX) && !metal::isfinite(kInf) && !metal::isfinite(kNaN));
  CHECK(metal::isnormal(1.0f) && !metal::isnormal(1e-40f) && !metal::isnormal(0.0f));
  CHECK(metal::isnormal(half(1.0f)) && !metal::isnormal(half::from_bits(0x03ff)));
  CHECK(metal::signbit(-0.0f) && !metal::signbit(0.0f) && metal::signbit(-kNaN));
  CHECK(metal::isnan(half(kNaN)) && metal::isinf(half(70000.0f)) && metal::isnan(bfloat(kNaN)));
  CHECK(all(metal::isnan(float4(kNaN, 1, kNaN, kInf)) == bool4(true, false, true, false)));
  CHECK(metal::isordered(1.0f, 2.0f) && metal::isunordered(kNaN, 2.0f));
  CHECK_F(metal::sign(-3.0f), -1.0f);
  CHECK_F(metal::sign(2.0f), 1.0f);
  CHECK_F(metal::sign(-0.0f), -0.0f);
  CHECK_F(metal::sign(kNaN), 0.0f);

  // NaN propagates through arithmetic
  CHECK_F(kNaN + 1.0f, kNaN);
  CHECK_F(float(half(kNaN) * half(2.0f)), kNaN);
  CHECK(metal::isnan(float4(kNaN, 1, 1, 1) * 2.0f).x);

  // half / bfloat math: computed in float and rounded
  CHECK_H(metal::exp(half(0.0f)), 0x3c00);
  CHECK_H(metal::exp(half(-kInf)), 0x0000);
  CHECK_H(metal::exp(half(12.0f)), 0x7c00);  // e^12 > 65504
  CHECK_H(metal::sqrt(half(2.0f)), 0x3da8);
  CHECK_H(metal::log(half(1.0f)), 0x0000);
  CHECK_H(metal::precise::sqrt(half(4.0f)), 0x4000);
  CHECK_H(metal::fast::exp(half(1.0f)), 0x4170);
  CHECK_H(metal::exp(bfloat(1.0f)), 0x402e);
  CHECK_H(metal::tanh(bfloat(100.0f)), 0x3f80);
  CHECK(veq(metal::exp(half2(half(0.0f), half(-kInf))), half2(half(1.0f), half(0.0f))));
  CHECK(veq(metal::fast::exp(float4(0, 0, 0, -kInf)), float4(1, 1, 1, 0)));
  CHECK(veq(metal::sqrt(float4(1, 4, 9, 16).wzyx), float4(4, 3, 2, 1)));
  CHECK(veq(metal::pow(float2(2, 3), 2.0f), float2(4, 9)));
  CHECK(veq(metal::pow(2.0f, float2(2, 3)), float2(4, 8)));

  // clamp / mix / step / smoothstep / saturate / select
  CHECK_F(metal::clamp(5.0f, 0.0f, 1.0f), 1.0f);
  CHECK_F(metal::clamp(-5.0f, 0.0f, 1.0f), 0.0f);
  CHECK_F(metal::clamp(0.25f, 0, 1), 0.25f);
  CHECK_F(metal::clamp(kNaN, 0.0f, 1.0f), 0.0f);
  CHECK(metal::clamp(17, 0, 10) == 10 && metal::clamp(-3, 0, 10) == 0);
  CHECK_H(metal::clamp(half(1.5f), half(0), half(1)), 0x3c00);
  CHECK(veq(metal::clamp(float4(-1, 0.5f, 2, 3), 0.0f, 1.0f), float4(0, 0.5f, 1, 1)));
  CHECK(all(metal::clamp(int2(-5, 50), int2(0), int2(10)) == int2(0, 10)));
  CHECK_F(metal::mix(1.0f, 3.0f, 0.5f), 2.0f);
  CHECK_F(metal::mix(1.0f, 3.0f, 0.0f), 1.0f);
  CHECK(veq(metal::mix(float2(0, 10), float2(10, 20), 0.25f), float2(2.5f, 12.5f)));
  CHECK(veq(metal::mix(float2(0, 10), float2(10, 20), float2(0, 1)), float2(0, 20)));
  CHECK_F(metal::step(1.0f, 0.5f), 0.0f);
  CHECK_F(metal::step(1.0f, 1.0f), 1.0f);
  CHECK(veq(metal::step(0.5f, float4(0, 0.5f, 1, -1)), float4(0, 1, 1, 0)));
  CHECK_F(metal::smoothstep(0.0f, 1.0f, 0.5f), 0.5f);
  CHECK_F(metal::smoothstep(0.0f, 1.0f, -1.0f), 0.0f);
  CHECK_F(metal::smoothstep(0.0f, 1.0f, 2.0f), 1.0f);
  CHECK_F(metal::smoothstep(0.0f, 2.0f, 0.5f), 0.15625f);
  CHECK(veq(metal::smoothstep(0.0f, 1.0f, float2(0.5f, 2)), float2(0.5f, 1)));
  CHECK_F(metal::saturate(1.5f), 1.0f);
  CHECK_F(metal::saturate(-0.5f), 0.0f);
  CHECK_H(metal::saturate(half(0.5f)), 0x3800);
  CHECK_F(metal::select(1.0f, 2.0f, true), 2.0f);
  CHECK_F(metal::select(1.0f, 2.0f, false), 1.0f);
  CHECK(metal::select(1, 2, true) == 2);
  CHECK(veq(metal::select(float4(1), float4(2), bool4(true, false, true, false)), float4(2, 1, 2, 1)));
  CHECK(veq(metal::select(float2(1, 2), 0.0f, float2(1, 2) > 1.5f), float2(1, 0)));
  CHECK(all(metal::select(int2(1), int2(2), true) == int2(2)));

  // geometric
  float3 x(1, 2, 3), y(4, 5, 6);
  CHECK_F(metal::dot(x, y), 32.0f);
  CHECK_F(metal::dot(float4(1, 2, 3, 4), float4(1)), 10.0f);
  CHECK_F(metal::length(float2(3, 4)), 5.0f);
  CHECK_F(metal::length_squared(float2(3, 4)), 25.0f);
  CHECK_F(metal::distance(float2(1, 1), float2(4, 5)), 5.0f);
  CHECK_F(metal::distance_squared(float2(1, 1), float2(4, 5)), 25.0f);
  CHECK(veq(metal::normalize(float3(3, 0, 4)), float3(0.6f, 0, 0.8f)));
  CHECK(veq(metal::normalize(float2(0, -2)), float2(0, -1)));
  CHECK(veq(metal::cross(x, y), float3(-3, 6, -3)));
  CHECK(veq(metal::cross(float3(1, 0, 0), float3(0, 1, 0)), float3(0, 0, 1)));
  CHECK(veq(metal::reflect(float2(1, -1), float2(0, 1)), float2(1, 1)));
  CHECK(veq(metal::faceforward(float2(0, 1), float2(0, -1), float2(0, 1)), float2(0, 1)));
  CHECK(veq(metal::refract(float2(0, -1), float2(0, 1), 1.0f), float2(0, -1)));
  CHECK_H(metal::dot(half2(half(1.0f), half(2.0f)), half2(half(3.0f), half(4.0f))), 0x4980);
  CHECK_H(metal::length(half3(half(2.0f), half(3.0f), half(6.0f))), 0x4700);

  // integer functions
  CHECK(metal::popcount(0xf0f0u) == 8u && metal::popcount(-1) == 32 && metal::popcount(uchar(0xff)) == 8);
  CHECK(metal::popcount(uint64_t(~0ull)) == 64);
  CHECK(metal::clz(1u) == 31u && metal::clz(0u) == 32u && metal::clz(-1) == 0);
  CHECK(metal::clz(uchar(1)) == 7 && metal::clz(ushort(0)) == 16 && metal::clz(ulong(1)) == 63);
  CHECK(metal::ctz(8u) == 3u && metal::ctz(0u) == 32u && metal::ctz(uchar(0)) == 8);
  CHECK(metal::ctz(ulong(1) << 40) == 40);
  CHECK(metal::mulhi(0x80000000u, 4u) == 2u);
  CHECK(metal::mulhi(-2, 0x40000000) == -1);
  CHECK(metal::mulhi(int(0x40000000), 4) == 1);
  CHECK(metal::mulhi(~0ull, ~0ull) == ~0ull - 1);
  CHECK(metal::mulhi(uchar(200), uchar(200)) == uchar(156));
  CHECK(metal::rotate(0x80000001u, 1u) == 3u);
  CHECK(metal::rotate(0x80000001u, 33u) == 3u);
  CHECK(metal::rotate(uchar(0x81), uchar(4)) == uchar(0x18));
  CHECK(metal::rotate(1u, 0u) == 1u);
  CHECK(metal::reverse_bits(1u) == 0x80000000u && metal::reverse_bits(uchar(1)) == 0x80);
  CHECK(metal::reverse_bits(ushort(0x00f0)) == 0x0f00);
  CHECK(metal::extract_bits(0xabcdu, 4u, 8u) == 0xbcu);
  CHECK(metal::extract_bits(int(0x000000f0), 4u, 4u) == -1);  // sign-extended
  CHECK(metal::extract_bits(int(0x00000070), 4u, 4u) == 7);
  CHECK(metal::extract_bits(0xffffffffu, 0u, 32u) == 0xffffffffu);
  CHECK(metal::extract_bits(5u, 3u, 0u) == 0u);
  CHECK(metal::insert_bits(0xffffu, 0u, 4u, 8u) == 0xf00fu);
  CHECK(metal::insert_bits(0u, 0xffu, 28u, 8u) == 0xf0000000u);
  CHECK(metal::insert_bits(7u, 0u, 0u, 0u) == 7u);
  CHECK(metal::insert_bits(0u, 0xffffffffu, 0u, 32u) == 0xffffffffu);
  CHECK(metal::absdiff(3, -5) == 8 && metal::absdiff(2u, 7u) == 5u);
  CHECK(metal::addsat(INT_MAX, 1) == INT_MAX && metal::addsat(INT_MIN, -1) == INT_MIN);
  CHECK(metal::addsat(250u, 10u) == 260u && metal::addsat(uchar(250), uchar(10)) == uchar(255));
  CHECK(metal::subsat(0u, 1u) == 0u && metal::subsat(INT_MIN, 1) == INT_MIN && metal::subsat(INT_MAX, -1) == INT_MAX);
  CHECK(metal::subsat(char(-100), char(100)) == char(-128));
  CHECK(metal::hadd(INT_MAX, INT_MAX) == INT_MAX && metal::hadd(3, 4) == 3 && metal::rhadd(3, 4) == 4);
  CHECK(metal::hadd(-3, -4) == -4 && metal::rhadd(~0u, ~0u) == ~0u);
  CHECK(metal::mul24(0x00ffffff, 2) == -2 && metal::mul24(3u, 5u) == 15u && metal::mad24(2, 3, 4) == 10);
  CHECK(metal::madhi(0x80000000u, 4u, 1u) == 3u);
  CHECK(metal::madsat(INT_MAX, 2, 0) == INT_MAX && metal::madsat(uchar(16), uchar(16), uchar(0)) == uchar(255));
  CHECK(metal::madsat(3, 4, 5) == 17);
  CHECK(all(metal::popcount(uint4(0, 1, 3, 7)) == uint4(0, 1, 2, 3)));
  CHECK(all(metal::clz(uint2(1, 0)) == uint2(31, 32)));
  CHECK(all(metal::rotate(uint2(1, 0x80000000u), 1u) == uint2(2, 1)));
  CHECK(all(metal::mulhi(uint2(0x80000000u), uint2(2, 4)) == uint2(1, 2)));
  CHECK(all(metal::extract_bits(uint2(0xab, 0xcd), 4u, 4u) == uint2(0xa, 0xc)));
  CHECK(all(metal::insert_bits(uint2(0), uint2(1, 3), 4u, 2u) == uint2(0x10, 0x30)));
  CHECK(all(metal::max(int3(1, 5, -2), 0) == int3(1, 5, 0)));
}

// ---------------------------------------------------------------------------
// MLX utilities
// ---------------------------------------------------------------------------
static void test_mlx() {
  // a 2x3x4 array transposed to 4x3x2: shape (4, 3, 2), strides (1, 4, 12)
  const int shape[3] = {4, 3, 2};
  const int64_t strides[3] = {1, 4, 12};
  const int& ndim = 3;
  int bad = 0;
  for (uint e = 0; e < 24; ++e) {
    uint i0 = e / 6, i1 = (e / 2) % 3, i2 = e % 2;
    uint expect = i0 * 1 + i1 * 4 + i2 * 12;
    uint loc = elem_to_loc(e, shape, strides, ndim);
    if (loc != expect) ++bad;
    if (elem_to_loc<int64_t>(e, shape, strides, ndim) != int64_t(expect)) ++bad;
    if (elem_to_loc(int64_t(e), shape, strides, ndim) != int64_t(expect)) ++bad;
    // grid form: x = last dim, y = middle, z = the rest
    if (elem_to_loc(uint3(i2, i1, i0), shape, strides, ndim) != int64_t(expect)) ++bad;
    if (elem_to_loc_3(uint3(i2, i1, i0), strides) != int64_t(expect)) ++bad;
  }
  CHECK(bad == 0);
  CHECK(elem_to_loc(5u, shape, strides, 0) == 0u);
  CHECK(elem_to_loc_1(7u, int64_t(3)) == 21);
  const int64_t s2[2] = {10, 1};
  CHECK(elem_to_loc_2(uint2(3, 2), s2) == 23);
  // negative strides (reversed view) with 64-bit locations
  const int shp1[1] = {5};
  const int64_t neg[1] = {-2};
  CHECK(elem_to_loc<int64_t>(3u, shp1, neg, 1) == -6);
  {
    const int64_t sa[3] = {6, 2, 1}, sb[3] = {1, 4, 12};
    long2 l2 = elem_to_loc_2_nd(uint3(1, 2, 3), shape, sa, sb, 3);
    CHECK(l2.x == 1 + 2 * 2 + 3 * 6 && l2.y == 12 + 2 * 4 + 3 * 1);
    long3 l3 = elem_to_loc_3_nd(uint3(1, 2, 3), shape, sa, sb, strides, 3);
    CHECK(l3.z == 12 + 8 + 3);
    LoopedElemToLoc<2, int64_t> looper(3);
    int64_t locs[24];
    int lbad = 0;
    for (int e = 0; e < 24; ++e) {
      locs[e] = looper.location();
      if (locs[e] != elem_to_loc<int64_t>(uint(e), shape, strides, 3)) ++lbad;
      looper.next(shape, strides);
    }
    CHECK(lbad == 0);
  }
  CHECK(ceildiv(7, 2) == 4 && ceildiv(8u, 2u) == 4u && ceildiv(size_t(9), 4) == 3);

  // Limits
  CHECK_F(Limits<float>::max, kInf);
  CHECK_F(Limits<float>::min, -kInf);
  CHECK_F(Limits<float>::finite_max, FLT_MAX);
  CHECK_F(Limits<float>::finite_min, -FLT_MAX);
  CHECK_H(Limits<half>::max, 0x7c00);
  CHECK_H(Limits<half>::min, 0xfc00);
  CHECK_H(Limits<half>::finite_max, 0x7bff);
  CHECK_H(Limits<half>::finite_min, 0xfbff);
  CHECK_H(Limits<bfloat16_t>::max, 0x7f80);
  CHECK_H(Limits<bfloat16_t>::finite_min, 0xff7f);
  CHECK(Limits<int>::max == INT_MAX && Limits<int>::min == INT_MIN);
  CHECK(Limits<int32_t>::finite_max == INT_MAX);
  CHECK(Limits<uint32_t>::max == UINT_MAX && Limits<uint32_t>::min == 0);
  CHECK(Limits<int8_t>::min == -128 && Limits<uint8_t>::max == 255);
  CHECK(Limits<int16_t>::min == -32768 && Limits<uint16_t>::max == 65535);
  CHECK(Limits<int64_t>::max == LONG_MAX && Limits<uint64_t>::max == ULONG_MAX);
  CHECK(Limits<bool>::max == true && Limits<bool>::min == false);
  CHECK(Limits<complex64_t>::max.real == kInf && Limits<complex64_t>::min.imag == -kInf);
  CHECK(metal::numeric_limits<half>::epsilon().bits == 0x1400);
  CHECK(metal::numeric_limits<half>::min().bits == 0x0400);
  CHECK(metal::numeric_limits<half>::lowest().bits == 0xfbff);
  CHECK(metal::numeric_limits<half>::denorm_min().bits == 0x0001);
  CHECK(metal::isnan(metal::numeric_limits<half>::quiet_NaN()));
  CHECK(metal::numeric_limits<bfloat>::max().bits == 0x7f7f);
  CHECK(metal::numeric_limits<bfloat>::epsilon().bits == 0x3c00);
  CHECK(metal::numeric_limits<float>::epsilon() == FLT_EPSILON);
  CHECK(metal::numeric_limits<float>::infinity() == kInf);
  CHECK(metal::numeric_limits<int>::lowest() == INT_MIN && metal::numeric_limits<char>::max() == 127);
  CHECK(metal::numeric_limits<ushort>::max() == 65535 && metal::numeric_limits<ulong>::max() == ULONG_MAX);
  CHECK_F(HALF_MAX, 65504.0f);
  CHECK_F(M_PI_F, 3.14159274f);
  CHECK_H(M_PI_H, 0x4248);
  CHECK_F(MAXFLOAT, FLT_MAX);
  CHECK(metal::isinf(INFINITY) && metal::isnan(NAN));

  // complex64_t (MLX semantics)
  complex64_t a(1.0f, 2.0f), b(3.0f, -1.0f);
  complex64_t s = a + b, d = a - b, p = a * b, q = a / b;
  CHECK(s.real == 4 && s.imag == 1);
  CHECK(d.real == -2 && d.imag == 3);
  CHECK(p.real == 5 && p.imag == 5);
  CHECK_F(q.real, 0.1f);
  CHECK_F(q.imag, 0.7f);
  complex64_t r = complex64_t(2.0f);  // from float
  CHECK(r.real == 2 && r.imag == 0);
  complex64_t hc = half(1.5f);
  CHECK(hc.real == 1.5f);
  CHECK((a + 1.0f).real == 2 && (1.0f - a).imag == -2 && (2.0f / complex64_t(0, 1)).imag == -2);
  CHECK(a == complex64_t(1, 2) && a != b && b > a && a < b && a <= a && b >= a);
  CHECK(complex64_t(1, 3) > complex64_t(1, 2));  // ties on real compare imag
  complex64_t m = complex64_t(-5.0f, 5.0f) % complex64_t(3.0f, 3.0f);
  CHECK(m.real == 1 && m.imag == 2);
  complex64_t n = -a;
  CHECK(n.real == -1 && n.imag == -2);
  a += b;
  CHECK(a.real == 4 && a.imag == 1);
  float re = complex64_t(2.5f, 1.0f);  // conversion takes the real part
  CHECK(re == 2.5f);
  complex64_t lp = log1p(complex64_t(0.0f, 0.0f));
  CHECK(lp.real == 0 && lp.imag == 0);

  CHECK_F(log1p(0.0f), 0.0f);
  CHECK_F(log1p(1e-10f), 1e-10f);
  CHECK_F(log1p(kInf), kInf);
  CHECK_ULP(log1p(1.0f), 0.693147181f, 2);
  CHECK_H(log1p(bfloat(0.0f)), 0x0000);
  CHECK(WorkPerThread<half>::n == 4 && WorkPerThread<float>::n == 2);
  static_assert(is_same<ConditionalType<true, int, float>::type, int>::value, "");
  mlx::os_log logger("subsystem", "category");
  logger.log_debug("x = %d", 1);
}

// vec<T, 8> and vec<T, 16>: Metal's long vectors (sizes, alignment, operators,
// conversions, as_type, component-wise math and relational functions)
static void test_long_vectors() {
  static_assert(sizeof(vec<float, 8>) == 32 && alignof(vec<float, 8>) == 32, "");
  static_assert(sizeof(vec<bfloat, 8>) == 16 && alignof(vec<bfloat, 8>) == 16, "");
  static_assert(sizeof(vec<half, 16>) == 32 && alignof(vec<half, 16>) == 32, "");
  static_assert(sizeof(vec<uchar, 16>) == 16 && sizeof(packed_vec<float, 8>) == 32 &&
                    alignof(packed_vec<float, 8>) == 4, "");
  vec<float, 8> a(1, 2, 3, 4, 5, 6, 7, 8);
  vec<float, 8> b(float4(1, 1, 2, 2), float2(3, 3), 4, 4);
  vec<float, 8> c = a * b + 1.0f;
  CHECK(c[0] == 2 && c[3] == 9 && c[5] == 19 && c[7] == 33);
  vec<bool, 8> lt = a < b;
  CHECK(!lt[0] && !lt[1] && !lt[7] && !any(lt) && all(a >= b));
  vec<bfloat, 8> h(a);  // explicit conversion, rounding each component
  CHECK(float(h[6]) == 7.0f && float(vec<float, 8>(h)[7]) == 8.0f);
  vec<bfloat, 8> hz(0);
  CHECK(float(hz[3]) == 0.0f);
  uint4 bits = as_type<uint4>(h);
  CHECK(bits.x == (0x3f80u | (0x4000u << 16)));
  CHECK(veq(as_type<vec<bfloat, 8>>(bits), h));
  vec<int, 16> iv(3);
  iv[15] = -8;
  vec<int, 16> sh = iv << 2;
  CHECK(sh[0] == 12 && sh[15] == -32 && (iv / 0)[1] == 0);
  vec<float, 16> f16v = vec<float, 16>(iv);
  vec<int, 16> ai = abs(iv);
  CHECK(veq(abs(f16v), vec<float, 16>(ai)));
  vec<float, 8> m = max(a, 4.5f), e = exp(vec<float, 8>(0.0f));
  CHECK(m[0] == 4.5f && m[7] == 8 && e[4] == 1.0f);
  CHECK(dot(vec<float, 8>(1.0f), a) == 36.0f);
  vec<float, 8> s = select(b, a, a > b);  // a >= b everywhere
  bool same_as_a = veq(s, a);
  CHECK(same_as_a);
  a += b;
  CHECK(a[7] == 12);
  packed_vec<float, 8> pa = a;
  vec<float, 8> back = pa;
  CHECK(back[7] == 12);
}

int main() {
  test_half();
  test_vectors();
  test_long_vectors();
  test_as_type();
  test_math();
  test_mlx();
  printf("%d checks, %d failed (F16C path: %d)\n", g_checks, g_fail, int(MKPY_METAL_F16C));
  return g_fail > 100 ? 100 : g_fail;
}
