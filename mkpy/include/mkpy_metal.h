// mkpy_metal.h: the runtime header every JIT-compiled mkpy kernel includes.
//
// It emulates, in C++17, the parts of the Metal Shading Language (MSL) standard
// library that MLX `mx.fast.metal_kernel` kernels use, plus the helpers MLX puts
// in front of every custom kernel (mlx/backend/metal/kernels/utils.h: Limits,
// elem_to_loc, ceildiv, complex64_t, ...).  The goal is that translated kernel
// source compiles unchanged and gives the numbers an Apple GPU gives.
//
// Contents (in order):
//   1. scalar types: half, bfloat, aliases, half/bfloat arithmetic
//   2. metal type traits, numeric_limits
//   3. vectors: vec<T,N>, packed_vec<T,N>, swizzles, operators
//   4. as_type
//   5. math (metal::, metal::precise::, metal::fast::), integer, relational,
//      geometric functions
//   6. [reserved] atomics, barriers, SIMD-group functions (not here)
//   7. MSL constants (M_PI_F, MAXFLOAT, HALF_MAX, ...)
//   8. MLX kernel utilities (global namespace, as in MLX)
//
// Sections 5 and 8, the swizzles of section 3 and section 5's functions one by
// one can be left out by macros that only NVRTC programs define (MKPY_METAL_NO_MATH,
// MKPY_METAL_NO_MLX, MKPY_METAL_SWIZZLES, MKPY_METAL_MATH_NAMES: csrc/backend/cuda/
// parts.c); without them everything is declared.
//
// See docs/runtime_header.md for the rules the translator follows and the known
// differences from Metal.  Build requirements: C++17, clang >= 15 (uses
// __builtin_bit_cast, __builtin_is_constant_evaluated); works with and without
// -ffast-math.  Only the C/C++ standard library is used, and deliberately not
// <cmath>/<math.h> (they would put ::exp(double) etc. next to metal::exp and
// make calls like exp(2) ambiguous): math goes through __builtin_* functions.
#ifndef MKPY_METAL_H
#define MKPY_METAL_H

#ifndef __CUDACC_RTC__
// Metal's numeric_limits and nan() name infinities and NaNs whatever the math mode: clang 18
// and later warn about each under -ffast-math (-Wnan-infinity-disabled, unknown to clang 15)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wunknown-warning-option"
#pragma clang diagnostic ignored "-Wnan-infinity-disabled"
#endif

#ifdef __CUDACC_RTC__
#include "mkpy_cuda_std.h" // NVRTC has no system headers (the CUDA target, mkpy_cuda.h)
#else
#include <float.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <type_traits>
#endif

// MSL's built-in unsigned type names (glibc's <sys/types.h> declares the same
// typedefs for uint/ushort/ulong, which is allowed: they name the same types).
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;  // 64-bit on LP64, as MSL's ulong

#if defined(__F16C__) && !defined(MKPY_METAL_NO_F16C)
#define MKPY_METAL_F16C 1
#else
#define MKPY_METAL_F16C 0
#endif

namespace metal {

struct half;
struct bfloat;
// Metal's vector lengths: 2, 3, 4, 8 and 16 (section 3 below); any other
// vec<T, N> is an error naming them.
template <class T, int N>
struct vec {
  static_assert(N == 2 || N == 3 || N == 4 || N == 8 || N == 16,
                "metal::vec<T, N>: Metal's vectors have 2, 3, 4, 8 or 16 components");
};
template <class T, int N>
struct packed_vec {
  static_assert(N == 2 || N == 3 || N == 4 || N == 8 || N == 16,
                "metal::packed_vec<T, N>: Metal's vectors have 2, 3, 4, 8 or 16 components");
};

// Internal helpers live in metal::_mk; nothing in it is part of MSL.
namespace _mk {

using std::enable_if_t;
using std::is_same;

template <class T> struct is_hb : std::false_type {};
template <> struct is_hb<half> : std::true_type {};
template <> struct is_hb<bfloat> : std::true_type {};

// is_num: the scalar types a Metal kernel computes with.
template <class T>
struct is_num : std::integral_constant<bool, std::is_arithmetic<T>::value || is_hb<T>::value> {};
template <class T> using if_num = enable_if_t<is_num<T>::value, int>;
template <class T> using if_hb = enable_if_t<is_hb<T>::value, int>;
template <class T>
using if_int = enable_if_t<std::is_integral<T>::value && !is_same<T, bool>::value, int>;

constexpr uint32_t f2u(float f) { return __builtin_bit_cast(uint32_t, f); }
constexpr float u2f(uint32_t u) { return __builtin_bit_cast(float, u); }

// ---- float <-> binary16, round to nearest even, exact for inf/nan/subnormals.
// Integer-only, so flush-to-zero/denormals-are-zero modes and -ffast-math
// cannot change the result.  NaNs are quieted and keep their top payload bits
// (what F16C does).
constexpr uint16_t f32_to_f16_sw(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u)  // inf, nan
    return uint16_t(sign | 0x7c00u | (ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0u));
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax >= 0x38800000u) {                                 // normal half
    uint32_t r = ax - 0x38000000u;                         // rebias 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return uint16_t(sign | (r >> 13));
  }
  if (ax < 0x33000000u) return uint16_t(sign);  // < 2^-25 (2^-25 itself ties to 0)
  uint32_t e = ax >> 23;                        // 102..112: subnormal half
  uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  uint32_t sh = 126u - e;  // 14..24
  uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), hw = 1u << (sh - 1u);
  q += (rem > hw || (rem == hw && (q & 1u))) ? 1u : 0u;
  return uint16_t(sign | q);
}

constexpr float f16_to_f32_sw(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return u2f(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e == 0) {
    if (!m) return u2f(sign);
    uint32_t p = 31u - uint32_t(__builtin_clz(m));  // 0..9
    return u2f(sign | ((p + 103u) << 23) | ((m << (23u - p)) & 0x7fffffu));
  }
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

#if MKPY_METAL_F16C
typedef float mk_v4sf __attribute__((__vector_size__(16)));
typedef short mk_v8hi __attribute__((__vector_size__(16)));
#endif

constexpr uint16_t f2h(float f) {
#if MKPY_METAL_F16C
  if (!__builtin_is_constant_evaluated()) {
    mk_v4sf v = {f, 0.0f, 0.0f, 0.0f};
    return uint16_t(__builtin_ia32_vcvtps2ph(v, 0)[0]);  // imm 0: round to nearest even
  }
#endif
  return f32_to_f16_sw(f);
}

constexpr float h2f(uint16_t h) {
#if MKPY_METAL_F16C
  if (!__builtin_is_constant_evaluated()) {
    mk_v8hi v = {short(h), 0, 0, 0, 0, 0, 0, 0};
    return __builtin_ia32_vcvtph2ps(v)[0];
  }
#endif
  return f16_to_f32_sw(h);
}

// ---- float <-> bfloat16 (round to nearest even; NaN quieted).
constexpr uint16_t f2b(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}
constexpr float b2f(uint16_t b) { return u2f(uint32_t(b) << 16); }

// double -> float rounding to odd: a later round-to-nearest to a type with at
// most 22 significant bits (half, bfloat) is then correctly rounded.
inline float d2f_odd(double d) {
  float f = float(d);
  if (double(f) != d && d == d) {
    uint32_t u = f2u(f);
    double af = double(f) < 0 ? -double(f) : double(f), ad = d < 0 ? -d : d;
    if (af > ad) u -= 1u;  // truncate toward zero
    f = u2f(u | 1u);
  }
  return f;
}

}  // namespace _mk

// ===========================================================================
// 1. Scalar types
// ===========================================================================

// IEEE binary16.  Arithmetic is done in float and rounded once to half, which
// is the correctly rounded half result for + - * / (and sqrt, fma below).
struct half {
  uint16_t bits;

  half() = default;
  constexpr half(float f) : bits(_mk::f2h(f)) {}  // implicit, as MSL float -> half
  explicit constexpr half(bfloat b);
  constexpr operator float() const { return _mk::h2f(bits); }

  static constexpr half from_bits(uint16_t b) {
    half h{};
    h.bits = b;
    return h;
  }
  constexpr half operator-() const { return from_bits(uint16_t(bits ^ 0x8000u)); }
  constexpr half operator+() const { return *this; }
  constexpr half& operator++() { return *this = half(float(*this) + 1.0f); }
  constexpr half& operator--() { return *this = half(float(*this) - 1.0f); }
  constexpr half operator++(int) { half t = *this; ++*this; return t; }
  constexpr half operator--(int) { half t = *this; --*this; return t; }
};

// bfloat16.  As in MSL 3.1, float and half do not convert to bfloat implicitly
// (write bfloat(x)); integers do; bfloat converts implicitly to float.
struct bfloat {
  uint16_t bits;

  bfloat() = default;
  explicit constexpr bfloat(float f) : bits(_mk::f2b(f)) {}
  explicit constexpr bfloat(half h) : bits(_mk::f2b(float(h))) {}
  template <class I, std::enable_if_t<std::is_integral<I>::value, int> = 0>
  constexpr bfloat(I i) : bits(_mk::f2b(float(i))) {}
  constexpr operator float() const { return _mk::b2f(bits); }

  static constexpr bfloat from_bits(uint16_t b) {
    bfloat h{};
    h.bits = b;
    return h;
  }
  constexpr bfloat operator-() const { return from_bits(uint16_t(bits ^ 0x8000u)); }
  constexpr bfloat operator+() const { return *this; }
  constexpr bfloat& operator++() { return *this = bfloat(float(*this) + 1.0f); }
  constexpr bfloat& operator--() { return *this = bfloat(float(*this) - 1.0f); }
  constexpr bfloat operator++(int) { bfloat t = *this; ++*this; return t; }
  constexpr bfloat operator--(int) { bfloat t = *this; --*this; return t; }
};

constexpr half::half(bfloat b) : bits(_mk::f2h(float(b))) {}

typedef half float16_t;
typedef bfloat bfloat16_t;

namespace _mk {
// Result type of a binary operation with a half or bfloat operand (MSL's usual
// arithmetic conversions): same type -> that type; half/bfloat with an
// integer -> half/bfloat; anything with float (or double: Metal has no double,
// its unsuffixed literals are float) -> float; half with bfloat -> float.
template <class A, class B, class = void>
struct sres {};
template <class A, class B>
struct sres<A, B,
            enable_if_t<(is_hb<A>::value || is_hb<B>::value) && is_num<A>::value &&
                        is_num<B>::value>> {
  using type = std::conditional_t<
      is_same<A, B>::value, A,
      std::conditional_t<is_hb<A>::value && std::is_integral<B>::value, A,
                         std::conditional_t<is_hb<B>::value && std::is_integral<A>::value, B,
                                            float>>>;
};
}  // namespace _mk

// Each operand is converted to the result type first (an int becomes a half
// before a half addition, as in Metal), then the operation runs in float and is
// rounded once to the result type.
#define MK_HB_BINOP(op)                                                     \
  template <class A, class B, class R = typename _mk::sres<A, B>::type>     \
  constexpr R operator op(A a, B b) {                                       \
    return R(float(R(a)) op float(R(b)));                                   \
  }
#define MK_HB_CMPOP(op)                                                     \
  template <class A, class B, class R = typename _mk::sres<A, B>::type>     \
  constexpr bool operator op(A a, B b) {                                    \
    return float(R(a)) op float(R(b));                                      \
  }
MK_HB_BINOP(+)
MK_HB_BINOP(-)
MK_HB_BINOP(*)
MK_HB_BINOP(/)
MK_HB_CMPOP(==)
MK_HB_CMPOP(!=)
MK_HB_CMPOP(<)
MK_HB_CMPOP(<=)
MK_HB_CMPOP(>)
MK_HB_CMPOP(>=)
#undef MK_HB_BINOP
#undef MK_HB_CMPOP

// h op= x  is  h = H(h op x).
#define MK_HB_CASSIGN(H, op)                                                   \
  template <class B, class = typename _mk::sres<H, B>::type>                   \
  constexpr H& operator op##=(H& a, B b) {                                     \
    return a = H(a op b);                                                      \
  }
MK_HB_CASSIGN(half, +)
MK_HB_CASSIGN(half, -)
MK_HB_CASSIGN(half, *)
MK_HB_CASSIGN(half, /)
MK_HB_CASSIGN(bfloat, +)
MK_HB_CASSIGN(bfloat, -)
MK_HB_CASSIGN(bfloat, *)
MK_HB_CASSIGN(bfloat, /)
#undef MK_HB_CASSIGN

// ===========================================================================
// 2. Type traits and numeric_limits
// ===========================================================================

// MSL's <metal_type_traits> names.  The floating-point aware ones count half and
// bfloat as floating point, as Metal does.
using std::add_const;
using std::add_const_t;
using std::add_pointer;
using std::add_pointer_t;
using std::bool_constant;
using std::conditional;
using std::conditional_t;
using std::decay;
using std::decay_t;
using std::declval;
using std::enable_if;
using std::enable_if_t;
using std::false_type;
using std::integral_constant;
using std::is_array;
using std::is_array_v;
using std::is_base_of;
using std::is_base_of_v;
using std::is_class;
using std::is_class_v;
using std::is_const;
using std::is_const_v;
using std::is_convertible;
using std::is_convertible_v;
using std::is_enum;
using std::is_enum_v;
using std::is_integral;
using std::is_integral_v;
using std::is_pointer;
using std::is_pointer_v;
using std::is_reference;
using std::is_reference_v;
using std::is_same;
using std::is_same_v;
using std::is_unsigned;
using std::is_unsigned_v;
using std::is_void;
using std::is_void_v;
using std::make_signed;
using std::make_signed_t;
using std::make_unsigned;
using std::make_unsigned_t;
using std::remove_const;
using std::remove_const_t;
using std::remove_cv;
using std::remove_cv_t;
using std::remove_pointer;
using std::remove_pointer_t;
using std::remove_reference;
using std::remove_reference_t;
using std::remove_volatile;
using std::remove_volatile_t;
using std::true_type;
using std::void_t;

template <class T>
struct is_floating_point
    : bool_constant<std::is_floating_point<T>::value || _mk::is_hb<remove_cv_t<T>>::value> {};
template <class T> constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <class T>
struct is_arithmetic : bool_constant<std::is_arithmetic<T>::value || is_floating_point<T>::value> {};
template <class T> constexpr bool is_arithmetic_v = is_arithmetic<T>::value;
template <class T>
struct is_signed : bool_constant<std::is_signed<T>::value || is_floating_point<T>::value> {};
template <class T> constexpr bool is_signed_v = is_signed<T>::value;
template <class T> struct is_vector : false_type {};
template <class T, int N> struct is_vector<vec<T, N>> : true_type {};
template <class T> constexpr bool is_vector_v = is_vector<remove_cv_t<T>>::value;
template <class T>
struct is_scalar : bool_constant<std::is_scalar<T>::value || _mk::is_hb<remove_cv_t<T>>::value> {};
template <class T> constexpr bool is_scalar_v = is_scalar<T>::value;

namespace _mk {
struct no_limits {
  static constexpr bool is_specialized = false;
};
template <class T>
struct int_limits;
}  // namespace _mk

// Integer types get their limits from _mk::int_limits, instantiated on use.
template <class T>
struct numeric_limits
    : std::conditional_t<std::is_integral<T>::value && !std::is_same<T, bool>::value,
                         _mk::int_limits<T>, _mk::no_limits> {};

namespace _mk {
template <class T>
struct int_limits {
  using U = std::make_unsigned_t<T>;
  static constexpr bool is_specialized = true, is_signed = std::is_signed<T>::value,
                        is_integer = true, is_exact = true, has_infinity = false,
                        has_quiet_NaN = false, is_iec559 = false;
  static constexpr int radix = 2;
  static constexpr int digits = int(sizeof(T) * CHAR_BIT) - (is_signed ? 1 : 0);
  static constexpr int digits10 = digits * 301 / 1000;
  static constexpr T max() { return T(U(U(~U(0)) >> (is_signed ? 1 : 0))); }
  static constexpr T min() { return is_signed ? T(-max() - 1) : T(0); }
  static constexpr T lowest() { return min(); }
  static constexpr T epsilon() { return T(0); }
  static constexpr T round_error() { return T(0); }
  static constexpr T infinity() { return T(0); }
  static constexpr T quiet_NaN() { return T(0); }
  static constexpr T signaling_NaN() { return T(0); }
  static constexpr T denorm_min() { return T(0); }
};
template <class T, uint16_t Max, uint16_t Min, uint16_t Eps, uint16_t Inf, uint16_t QNaN,
          uint16_t SNaN, int Digits, int MinExp, int MaxExp>
struct fp16_limits {
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false,
                        is_exact = false, has_infinity = true, has_quiet_NaN = true,
                        is_iec559 = true;
  static constexpr int radix = 2, digits = Digits, min_exponent = MinExp, max_exponent = MaxExp;
  static constexpr T max() { return T::from_bits(Max); }
  static constexpr T min() { return T::from_bits(Min); }
  static constexpr T lowest() { return T::from_bits(uint16_t(Max | 0x8000u)); }
  static constexpr T epsilon() { return T::from_bits(Eps); }
  static constexpr T round_error() { return T(0.5f); }
  static constexpr T infinity() { return T::from_bits(Inf); }
  static constexpr T quiet_NaN() { return T::from_bits(QNaN); }
  static constexpr T signaling_NaN() { return T::from_bits(SNaN); }
  static constexpr T denorm_min() { return T::from_bits(1); }
};
}  // namespace _mk

template <> struct numeric_limits<bool> {
  static constexpr bool is_specialized = true, is_signed = false, is_integer = true;
  static constexpr int digits = 1;
  static constexpr bool min() { return false; }
  static constexpr bool max() { return true; }
  static constexpr bool lowest() { return false; }
  static constexpr bool epsilon() { return false; }
  static constexpr bool infinity() { return false; }
  static constexpr bool quiet_NaN() { return false; }
};
template <>
struct numeric_limits<half>
    : _mk::fp16_limits<half, 0x7bff, 0x0400, 0x1400, 0x7c00, 0x7e00, 0x7d00, 11, -13, 16> {};
template <>
struct numeric_limits<bfloat>
    : _mk::fp16_limits<bfloat, 0x7f7f, 0x0080, 0x3c00, 0x7f80, 0x7fc0, 0x7fa0, 8, -125, 128> {};
template <> struct numeric_limits<float> {
  static constexpr bool is_specialized = true, is_signed = true, is_integer = false,
                        is_exact = false, has_infinity = true, has_quiet_NaN = true,
                        is_iec559 = true;
  static constexpr int radix = 2, digits = FLT_MANT_DIG, digits10 = FLT_DIG,
                       min_exponent = FLT_MIN_EXP, max_exponent = FLT_MAX_EXP;
  static constexpr float max() { return FLT_MAX; }
  static constexpr float min() { return FLT_MIN; }
  static constexpr float lowest() { return -FLT_MAX; }
  static constexpr float epsilon() { return FLT_EPSILON; }
  static constexpr float round_error() { return 0.5f; }
  static constexpr float infinity() { return __builtin_huge_valf(); }
  static constexpr float quiet_NaN() { return __builtin_nanf(""); }
  static constexpr float signaling_NaN() { return __builtin_nansf(""); }
  static constexpr float denorm_min() { return __FLT_DENORM_MIN__; }
};

// ===========================================================================
// 3. Vectors
// ===========================================================================
//
// vec<T,N> (N = 2, 3, 4) has MSL's size and alignment: sizeof(float3) ==
// alignof(float3) == 16, sizeof(half2) == 4, ...  Its storage is an anonymous
// union of
//   - T _v[N]                 (indexing: v[i])
//   - struct { T x, y, z, w; } and struct { T r, g, b, a; }   (real lvalues)
//   - one zero-overhead proxy member per 2/3/4-component swizzle (.xy, .zyx,
//     .xxxx, .bgra, ...): a _mk::stor<T, N>::swz<T, I...> that holds the same storage.
// A proxy converts implicitly to vec<T, M> (through vec's constructor), works
// in any vector expression, constructor or math function, and (without
// repeated components) can be assigned and compound-assigned.  Where C++ needs
// the vector type itself (member access or indexing on a swizzle, auto, ?:
// between two different swizzles) write (+v.xy).
//
// Compile-time note: instantiating vec<T,4> instantiates its 336 swizzle types
// (vec<T,3>: 117, vec<T,2>: 28), which is most of what using a vector type
// costs; the swizzle type is therefore kept minimal, and each vector type has
// its own swizzle template (stor<T, N>::swz, below).

namespace _mk {

template <int... I>
constexpr bool distinct() {
  const int a[] = {I...};
  for (unsigned i = 0; i < sizeof...(I); ++i)
    for (unsigned j = i + 1; j < sizeof...(I); ++j)
      if (a[i] == a[j]) return false;
  return true;
}

template <int... I>
constexpr int swz_idx(int k) {
  const int t[] = {I...};
  return t[k];
}

// The swizzle proxy is a member template of the storage (stor<T, N>::swz,
// defined with it below), so that each vector type has a template of its own:
// a kernel compiled against the precompiled header then reads from it the
// swizzle types of the vector types it uses, not those of every vector type
// the header instantiated (clang reads all the specializations of a template
// from a PCH at the first use of one).  These traits recognise it.
template <class X, class = void>
struct is_swz : std::false_type {};
template <class X>
struct is_swz<X, std::void_t<typename X::swz_elem>> : std::true_type {};
// Is X a swizzle with element type T?
template <class X, class T>
constexpr bool swz_of() {
  if constexpr (is_swz<X>::value) return std::is_same<typename X::swz_elem, T>::value;
  else return false;
}

// Component i of any vector-like value.
template <class V>
constexpr auto at(const V& v, int i) -> decltype(v[i]) {
  return v[i];
}
template <class S, std::enable_if_t<is_swz<S>::value, int> = 0>
constexpr typename S::swz_elem at(const S& p, int i) {
  return p.s[S::idx(i)];
}

// vt<X>: n = component count of a vector-like type (vec, packed_vec, swizzle
// proxy), 0 for anything else; E = its element type.
template <class X, class = void>
struct vt {
  static constexpr int n = 0;
  using E = void;
};
template <class T, int N>
struct vt<vec<T, N>> {
  static constexpr int n = N;
  using E = T;
};
template <class T, int N>
struct vt<packed_vec<T, N>> {
  static constexpr int n = N;
  using E = T;
};
template <class X>
struct vt<X, std::void_t<typename X::swz_elem>> {
  static constexpr int n = X::swz_len;
  using E = typename X::swz_elem;
};

// Component count of a constructor argument: vectors count their components,
// scalars 1, anything else makes the sum invalid.
template <class X>
constexpr int ncomp1() {
  return vt<X>::n ? vt<X>::n : (is_num<X>::value ? 1 : 1000);
}
template <class... A>
constexpr int ncomp() {
  return (0 + ... + ncomp1<A>());
}
template <class T, class A>
constexpr void put(T* d, int& k, const A& a) {
  if constexpr (vt<A>::n == 0) {
    d[k++] = T(a);
  } else {
    for (int j = 0; j < vt<A>::n; ++j) d[k++] = T(at(a, j));
  }
}

}  // namespace _mk

// Members shared by vec and packed_vec (CLS is the class name, N its size).
#define MK_VEC_MEMBERS(CLS, N)                                                           \
  using elem_t = T;                                                                      \
  static constexpr int size = N;                                                         \
  CLS() = default;                                                                       \
  CLS(const CLS&) = default;                                                             \
  constexpr CLS& operator=(const CLS& o) {                                               \
    for (int i = 0; i < N; ++i) _v[i] = o._v[i];                                         \
    return *this;                                                                        \
  }                                                                                      \
  /* splat: float4(1.0f), and implicit scalar -> vector as in MSL */                     \
  template <class S, ::metal::_mk::if_num<S> = 0>                                        \
  constexpr CLS(S s) : ::metal::_mk::stor<T, N>(0) {                                    \
    for (int i = 0; i < N; ++i) _v[i] = T(s);                                            \
  }                                                                                      \
  /* conversion from another vector-like type of the same length: float4(int4) */       \
  template <class A, ::std::enable_if_t<::metal::_mk::vt<A>::n == N &&                  \
                                            !::std::is_same<A, CLS>::value &&            \
                                            !::metal::_mk::swz_of<A, T>(),               \
                                        int> = 0>                                        \
  constexpr explicit CLS(const A& a) : ::metal::_mk::stor<T, N>(0) {                   \
    for (int i = 0; i < N; ++i) _v[i] = T(::metal::_mk::at(a, i));                       \
  }                                                                                      \
  /* a swizzle of this element type converts implicitly: float2 t = v.zw */            \
  template <class S_, ::std::enable_if_t<::metal::_mk::swz_of<S_, T>() && S_::swz_len == N, \
                                         int> = 0>                                       \
  constexpr CLS(const S_& p) : ::metal::_mk::stor<T, N>(0) {                            \
    for (int k = 0; k < N; ++k) _v[k] = p.s[S_::idx(k)];                                 \
  }                                                                                      \
  /* scalars and vectors whose component counts add up to N: float4(v.xy, 0, 1) */      \
  template <class A0, class A1, class... As,                                             \
            ::std::enable_if_t<::metal::_mk::ncomp<A0, A1, As...>() == N, int> = 0>      \
  constexpr CLS(const A0& a0, const A1& a1, const As&... as)                          \
      : ::metal::_mk::stor<T, N>(0) {                                                    \
    int k = 0;                                                                           \
    ::metal::_mk::put(_v, k, a0);                                                        \
    ::metal::_mk::put(_v, k, a1);                                                        \
    (::metal::_mk::put(_v, k, as), ...);                                                 \
  }                                                                                      \
  constexpr T& operator[](int i) { return _v[i]; }                                       \
  constexpr const T& operator[](int i) const { return _v[i]; }                           \
  constexpr CLS& operator++() {                                                          \
    for (int i = 0; i < N; ++i) ++_v[i];                                                 \
    return *this;                                                                        \
  }                                                                                      \
  constexpr CLS& operator--() {                                                          \
    for (int i = 0; i < N; ++i) --_v[i];                                                 \
    return *this;                                                                        \
  }                                                                                      \
  constexpr CLS operator++(int) {                                                        \
    CLS t = *this;                                                                       \
    ++*this;                                                                             \
    return t;                                                                            \
  }                                                                                      \
  constexpr CLS operator--(int) {                                                        \
    CLS t = *this;                                                                       \
    --*this;                                                                             \
    return t;                                                                            \
  }

// ---- swizzle member generation.  MK_SWk(S, N) declares every k-component
// swizzle of an N-component vector with letter set S (0: xyzw, 1: rgba).
#define MK_LT0_0 x
#define MK_LT0_1 y
#define MK_LT0_2 z
#define MK_LT0_3 w
#define MK_LT1_0 r
#define MK_LT1_1 g
#define MK_LT1_2 b
#define MK_LT1_3 a
#define MK_CAT2_(a, b) a##b
#define MK_CAT2(a, b) MK_CAT2_(a, b)
#define MK_CAT3_(a, b, c) a##b##c
#define MK_CAT3(a, b, c) MK_CAT3_(a, b, c)
#define MK_CAT4_(a, b, c, d) a##b##c##d
#define MK_CAT4(a, b, c, d) MK_CAT4_(a, b, c, d)
// one loop macro per nesting level (a macro cannot expand inside itself)
#define MK_I1_2(F, ...) F(__VA_ARGS__, 0) F(__VA_ARGS__, 1)
#define MK_I1_3(F, ...) MK_I1_2(F, __VA_ARGS__) F(__VA_ARGS__, 2)
#define MK_I1_4(F, ...) MK_I1_3(F, __VA_ARGS__) F(__VA_ARGS__, 3)
#define MK_I2_2(F, ...) F(__VA_ARGS__, 0) F(__VA_ARGS__, 1)
#define MK_I2_3(F, ...) MK_I2_2(F, __VA_ARGS__) F(__VA_ARGS__, 2)
#define MK_I2_4(F, ...) MK_I2_3(F, __VA_ARGS__) F(__VA_ARGS__, 3)
#define MK_I3_2(F, ...) F(__VA_ARGS__, 0) F(__VA_ARGS__, 1)
#define MK_I3_3(F, ...) MK_I3_2(F, __VA_ARGS__) F(__VA_ARGS__, 2)
#define MK_I3_4(F, ...) MK_I3_3(F, __VA_ARGS__) F(__VA_ARGS__, 3)
#define MK_I4_2(F, ...) F(__VA_ARGS__, 0) F(__VA_ARGS__, 1)
#define MK_I4_3(F, ...) MK_I4_2(F, __VA_ARGS__) F(__VA_ARGS__, 2)
#define MK_I4_4(F, ...) MK_I4_3(F, __VA_ARGS__) F(__VA_ARGS__, 3)
#define MK_E2(S, N, a, b) \
  swz<T, a, b> MK_CAT2(MK_LT##S##_##a, MK_LT##S##_##b);
#define MK_E3(S, N, a, b, c) \
  swz<T, a, b, c> MK_CAT3(MK_LT##S##_##a, MK_LT##S##_##b, MK_LT##S##_##c);
#define MK_E4(S, N, a, b, c, d)                                                   \
  swz<T, a, b, c, d> MK_CAT4(MK_LT##S##_##a, MK_LT##S##_##b, \
                             MK_LT##S##_##c, MK_LT##S##_##d);
#define MK_SW2(S, N) MK_I1_##N(MK_SW2_1, S, N)
#define MK_SW2_1(S, N, a) MK_I2_##N(MK_E2, S, N, a)
#define MK_SW3(S, N) MK_I1_##N(MK_SW3_1, S, N)
#define MK_SW3_1(S, N, a) MK_I2_##N(MK_SW3_2, S, N, a)
#define MK_SW3_2(S, N, a, b) MK_I3_##N(MK_E3, S, N, a, b)
#define MK_SW4(S, N) MK_I1_##N(MK_SW4_1, S, N)
#define MK_SW4_1(S, N, a) MK_I2_##N(MK_SW4_2, S, N, a)
#define MK_SW4_2(S, N, a, b) MK_I3_##N(MK_SW4_3, S, N, a, b)
#define MK_SW4_3(S, N, a, b, c) MK_I4_##N(MK_E4, S, N, a, b, c)
// MKPY_METAL_SWIZZLES (all by default) picks the swizzle sets a program
// declares, one bit each: 1, 2, 4 the 2-, 3- and 4-component swizzles of xyzw,
// 8, 16, 32 those of rgba.  A kernel compiled by NVRTC leaves out the sets its
// text names none of: most of a vector type's cost (backend/cuda/parts.c).
#ifndef MKPY_METAL_SWIZZLES
#define MKPY_METAL_SWIZZLES 63
#endif
#if MKPY_METAL_SWIZZLES & 1
#define MK_SWZ_X2(N) MK_SW2(0, N)
#else
#define MK_SWZ_X2(N)
#endif
#if MKPY_METAL_SWIZZLES & 2
#define MK_SWZ_X3(N) MK_SW3(0, N)
#else
#define MK_SWZ_X3(N)
#endif
#if MKPY_METAL_SWIZZLES & 4
#define MK_SWZ_X4(N) MK_SW4(0, N)
#else
#define MK_SWZ_X4(N)
#endif
#if MKPY_METAL_SWIZZLES & 8
#define MK_SWZ_R2(N) MK_SW2(1, N)
#else
#define MK_SWZ_R2(N)
#endif
#if MKPY_METAL_SWIZZLES & 16
#define MK_SWZ_R3(N) MK_SW3(1, N)
#else
#define MK_SWZ_R3(N)
#endif
#if MKPY_METAL_SWIZZLES & 32
#define MK_SWZ_R4(N) MK_SW4(1, N)
#else
#define MK_SWZ_R4(N)
#endif
#define MK_SWIZZLES(N) \
  MK_SWZ_X2(N) MK_SWZ_X3(N) MK_SWZ_X4(N) MK_SWZ_R2(N) MK_SWZ_R3(N) MK_SWZ_R4(N)

#define MK_STORAGE_2 \
  T _v[2];           \
  struct {           \
    T x, y;          \
  };                 \
  struct {           \
    T r, g;          \
  };
#define MK_STORAGE_3 \
  T _v[3];           \
  struct {           \
    T x, y, z;       \
  };                 \
  struct {           \
    T r, g, b;       \
  };
#define MK_STORAGE_4 \
  T _v[4];           \
  struct {           \
    T x, y, z, w;    \
  };                 \
  struct {           \
    T r, g, b, a;    \
  };

namespace _mk {
// The storage union, shared by vec<T,N> and packed_vec<T,N> (they differ only
// in alignment), and the swizzle proxy swz<T, I...> of its vector type: it
// holds the whole parent vector.  Reading a swizzle goes through vec's
// implicit constructor from it (and _mk::at) rather than a conversion
// operator here, which is cheaper.  Assignment takes a vec<T, M>; other
// swizzles, packed vectors and scalars convert to it implicitly.  The value is
// read completely before any component is written, so v.xy = v.yx and
// v.wzyx = v work.  (Copying a swz, e.g. `auto t = v.xy;`, copies the whole
// parent vector, which is what its reads need; the warning about that
// implicit copy is silenced.)  The element type is a template argument of the
// proxy as well, so that argument-dependent lookup sees it (metal::half).
template <class T, int N>
struct stor;
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-copy-with-user-provided-copy"
#define MK_DEFINE_STOR(N)                                                                  \
  template <class T>                                                                       \
  struct stor<T, N> {                                                                      \
    template <class E, int... I>                                                           \
    struct swz {                                                                           \
      using swz_elem = E;                                                                  \
      static constexpr int swz_len = int(sizeof...(I));                                   \
      static constexpr int idx(int k) { return swz_idx<I...>(k); }                         \
      E s[N]; /* the whole parent vector */                                                \
      explicit swz() = default; /* explicit: not an aggregate, so v.xy = {1, 2} works */   \
      constexpr swz& operator=(const swz& o) { return *this = vec<E, swz_len>(o); }        \
      constexpr swz& operator=(const vec<E, swz_len>& v) {                                 \
        static_assert(distinct<I...>(), "cannot assign to a swizzle with repeated components"); \
        const vec<E, swz_len> t = v;                                                       \
        for (int k = 0; k < swz_len; ++k) s[idx(k)] = t[k];                                \
        return *this;                                                                      \
      }                                                                                    \
    };                                                                                     \
    union {                                                                                \
      MK_STORAGE_##N                                                                       \
      MK_SWIZZLES(N)                                                                       \
    };                                                                                     \
    stor() = default;                                                                      \
    constexpr explicit stor(int) : _v{} {}                                                 \
  };
MK_DEFINE_STOR(2)
MK_DEFINE_STOR(3)
MK_DEFINE_STOR(4)
#undef MK_DEFINE_STOR
#pragma clang diagnostic pop
// The long vectors: Metal's vec<T,N> is clang's ext_vector_type(N), and
// Metal's compiler takes N = 8 and 16 as well (vec<bfloat, 8>, vec<float, 8>
// in shipped kernels): indexing, operators, conversions, as_type and the
// component-wise functions, but no named components or swizzles.
#define MK_DEFINE_LONG_STOR(N)              \
  template <class T>                        \
  struct stor<T, N> {                       \
    T _v[N];                                \
    stor() = default;                       \
    constexpr explicit stor(int) : _v{} {}  \
  };
MK_DEFINE_LONG_STOR(8)
MK_DEFINE_LONG_STOR(16)
#undef MK_DEFINE_LONG_STOR
}  // namespace _mk

#define MK_DEFINE_VEC(N, ALIGN)                             \
  template <class T>                                        \
  struct alignas(ALIGN) vec<T, N> : _mk::stor<T, N> {       \
    using _mk::stor<T, N>::_v;                              \
    MK_VEC_MEMBERS(vec, N)                                  \
  };                                                        \
  template <class T>                                        \
  struct packed_vec<T, N> : _mk::stor<T, N> {               \
    using _mk::stor<T, N>::_v;                              \
    MK_VEC_MEMBERS(packed_vec, N)                           \
    constexpr packed_vec(const vec<T, N>& o) : _mk::stor<T, N>(0) { \
      for (int i = 0; i < N; ++i) _v[i] = o[i];             \
    }                                                       \
    constexpr operator vec<T, N>() const {                  \
      vec<T, N> o{};                                        \
      for (int i = 0; i < N; ++i) o[i] = _v[i];             \
      return o;                                             \
    }                                                       \
  };

MK_DEFINE_VEC(2, 2 * sizeof(T))
MK_DEFINE_VEC(3, 4 * sizeof(T))
MK_DEFINE_VEC(4, 4 * sizeof(T))
MK_DEFINE_VEC(8, 8 * sizeof(T))
MK_DEFINE_VEC(16, 16 * sizeof(T))

#define MK_VEC_TYPES(T, name)          \
  typedef vec<T, 2> name##2;           \
  typedef vec<T, 3> name##3;           \
  typedef vec<T, 4> name##4;           \
  typedef packed_vec<T, 2> packed_##name##2; \
  typedef packed_vec<T, 3> packed_##name##3; \
  typedef packed_vec<T, 4> packed_##name##4;
MK_VEC_TYPES(bool, bool)
MK_VEC_TYPES(char, char)
MK_VEC_TYPES(uchar, uchar)
MK_VEC_TYPES(short, short)
MK_VEC_TYPES(ushort, ushort)
MK_VEC_TYPES(int, int)
MK_VEC_TYPES(uint, uint)
MK_VEC_TYPES(long, long)
MK_VEC_TYPES(ulong, ulong)
MK_VEC_TYPES(half, half)
MK_VEC_TYPES(float, float)
MK_VEC_TYPES(bfloat, bfloat)
#undef MK_VEC_TYPES

#undef MK_VEC_MEMBERS
#undef MK_DEFINE_VEC
#undef MK_SWIZZLES
#undef MK_SWZ_X2
#undef MK_SWZ_X3
#undef MK_SWZ_X4
#undef MK_SWZ_R2
#undef MK_SWZ_R3
#undef MK_SWZ_R4
#undef MK_STORAGE_2
#undef MK_STORAGE_3
#undef MK_STORAGE_4
#undef MK_SW2
#undef MK_SW2_1
#undef MK_SW3
#undef MK_SW3_1
#undef MK_SW3_2
#undef MK_SW4
#undef MK_SW4_1
#undef MK_SW4_2
#undef MK_SW4_3
#undef MK_E2
#undef MK_E3
#undef MK_E4
#undef MK_I1_2
#undef MK_I1_3
#undef MK_I1_4
#undef MK_I2_2
#undef MK_I2_3
#undef MK_I2_4
#undef MK_I3_2
#undef MK_I3_3
#undef MK_I3_4
#undef MK_I4_2
#undef MK_I4_3
#undef MK_I4_4
#undef MK_CAT2
#undef MK_CAT2_
#undef MK_CAT3
#undef MK_CAT3_
#undef MK_CAT4
#undef MK_CAT4_
#undef MK_LT0_0
#undef MK_LT0_1
#undef MK_LT0_2
#undef MK_LT0_3
#undef MK_LT1_0
#undef MK_LT1_1
#undef MK_LT1_2
#undef MK_LT1_3

// ---- vector operators (free templates, found for vec, packed_vec and swizzle
// proxies).  vector op vector needs the same length and element type; a scalar
// operand is converted to the vector's element type.
namespace _mk {
template <class A, class B, class = void>
struct vbin {};
template <class A, class B>
struct vbin<A, B,
            enable_if_t<(vt<A>::n > 0) && vt<A>::n == vt<B>::n &&
                        is_same<typename vt<A>::E, typename vt<B>::E>::value>> {
  using type = vec<typename vt<A>::E, vt<A>::n>;
};
template <class A, class B>
struct vbin<A, B, enable_if_t<(vt<A>::n > 0) && vt<B>::n == 0 && is_num<B>::value>> {
  using type = vec<typename vt<A>::E, vt<A>::n>;
};
template <class A, class B>
struct vbin<A, B, enable_if_t<vt<A>::n == 0 && is_num<A>::value && (vt<B>::n > 0)>> {
  using type = vec<typename vt<B>::E, vt<B>::n>;
};
template <class A, class = void>
struct vun {};
template <class A>
struct vun<A, enable_if_t<(vt<A>::n > 0)>> {
  using type = vec<typename vt<A>::E, vt<A>::n>;
};

// Element operations; signed integers wrap (as on the GPU) instead of being UB.
template <class T, bool = std::is_integral<T>::value && std::is_signed<T>::value>
struct wrap {
  using type = T;
};
template <class T>
struct wrap<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <class T> using wrap_t = typename wrap<T>::type;
template <class T> constexpr T op_add(T a, T b) { return T(wrap_t<T>(a) + wrap_t<T>(b)); }
template <class T> constexpr T op_sub(T a, T b) { return T(wrap_t<T>(a) - wrap_t<T>(b)); }
template <class T> constexpr T op_mul(T a, T b) { return T(wrap_t<T>(a) * wrap_t<T>(b)); }
template <class T>
constexpr T op_neg(T a) {
  if constexpr (std::is_integral<T>::value) return T(wrap_t<T>(0) - wrap_t<T>(a));
  else return T(-a);
}
// Integer division never traps: x / 0 and x % 0 give 0 (the GPU does not trap
// either; 0 is also what mkpy's core ops give), INT_MIN / -1 wraps.
template <class T>
constexpr T op_div(T a, T b) {
  if constexpr (std::is_integral<T>::value) {
    if (b == 0) return T(0);
    if constexpr (std::is_signed<T>::value)
      if (b == T(-1)) return op_neg(a);
  }
  return T(a / b);
}
template <class T>
constexpr T op_mod(T a, T b) {
  if constexpr (std::is_signed<T>::value)
    if (b == T(-1)) return T(0);
  return b == 0 ? T(0) : T(a % b);
}
template <class T> constexpr T op_and(T a, T b) { return T(a & b); }
template <class T> constexpr T op_or(T a, T b) { return T(a | b); }
template <class T> constexpr T op_xor(T a, T b) { return T(a ^ b); }
// Shift counts are taken modulo the bit width (OpenCL/Metal vector semantics).
template <class T>
constexpr T op_shl(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return T(U(U(a) << (unsigned(b) & (sizeof(T) * 8 - 1))));
}
template <class T>
constexpr T op_shr(T a, T b) {
  return T(a >> (unsigned(b) & (sizeof(T) * 8 - 1)));
}
}  // namespace _mk

#define MK_VBINOP(op, fn)                                                 \
  template <class A, class B, class V = typename _mk::vbin<A, B>::type>   \
  constexpr V operator op(const A& a, const B& b) {                       \
    V x(a), y(b), r{};                                                    \
    for (int i = 0; i < V::size; ++i) r[i] = _mk::fn(x[i], y[i]);        \
    return r;                                                             \
  }
#define MK_VCMPOP(op)                                                     \
  template <class A, class B, class V = typename _mk::vbin<A, B>::type>   \
  constexpr vec<bool, V::size> operator op(const A& a, const B& b) {      \
    V x(a), y(b);                                                         \
    vec<bool, V::size> r{};                                               \
    for (int i = 0; i < V::size; ++i) r[i] = x[i] op y[i];               \
    return r;                                                             \
  }
#define MK_VLOGOP(op)                                                     \
  template <class A, class B, class V = typename _mk::vbin<A, B>::type>   \
  constexpr vec<bool, V::size> operator op(const A& a, const B& b) {      \
    V x(a), y(b);                                                         \
    vec<bool, V::size> r{};                                               \
    for (int i = 0; i < V::size; ++i) r[i] = bool(x[i]) op bool(y[i]);   \
    return r;                                                             \
  }
// x op= y  is  x = x op y  (works for vec, packed_vec and swizzles)
#define MK_VCASSIGN(op)                                                          \
  template <class X, class B, class = typename _mk::vbin<X, B>::type>            \
  constexpr X& operator op##=(X& x, const B& b) {                                \
    x = x op b;                                                                  \
    return x;                                                                    \
  }
MK_VBINOP(+, op_add)
MK_VBINOP(-, op_sub)
MK_VBINOP(*, op_mul)
MK_VBINOP(/, op_div)
MK_VBINOP(%, op_mod)
MK_VBINOP(&, op_and)
MK_VBINOP(|, op_or)
MK_VBINOP(^, op_xor)
MK_VBINOP(<<, op_shl)
MK_VBINOP(>>, op_shr)
MK_VCMPOP(==)
MK_VCMPOP(!=)
MK_VCMPOP(<)
MK_VCMPOP(<=)
MK_VCMPOP(>)
MK_VCMPOP(>=)
MK_VLOGOP(&&)
MK_VLOGOP(||)
MK_VCASSIGN(+)
MK_VCASSIGN(-)
MK_VCASSIGN(*)
MK_VCASSIGN(/)
MK_VCASSIGN(%)
MK_VCASSIGN(&)
MK_VCASSIGN(|)
MK_VCASSIGN(^)
MK_VCASSIGN(<<)
MK_VCASSIGN(>>)
#undef MK_VBINOP
#undef MK_VCMPOP
#undef MK_VLOGOP
#undef MK_VCASSIGN

template <class A, class V = typename _mk::vun<A>::type>
constexpr V operator-(const A& a) {
  V x(a), r{};
  for (int i = 0; i < V::size; ++i) r[i] = _mk::op_neg(x[i]);
  return r;
}
template <class A, class V = typename _mk::vun<A>::type>
constexpr V operator+(const A& a) {
  return V(a);
}
template <class A, class V = typename _mk::vun<A>::type>
constexpr V operator~(const A& a) {
  V x(a), r{};
  for (int i = 0; i < V::size; ++i) r[i] = typename V::elem_t(~x[i]);
  return r;
}
template <class A, class V = typename _mk::vun<A>::type>
constexpr vec<bool, V::size> operator!(const A& a) {
  V x(a);
  vec<bool, V::size> r{};
  for (int i = 0; i < V::size; ++i) r[i] = !bool(x[i]);
  return r;
}
// ===========================================================================
// 4. as_type: reinterpret the bits of a value of the same size
// ===========================================================================
template <class T, class U>
constexpr T as_type(const U& u) {
  if constexpr (_mk::is_swz<U>::value) {
    return as_type<T>(typename _mk::vun<U>::type(u));
  } else {
    static_assert(sizeof(T) == sizeof(U), "as_type: source and destination sizes differ");
    if constexpr (std::is_trivially_copyable<T>::value && std::is_trivially_copyable<U>::value) {
      return __builtin_bit_cast(T, u);
    } else {
      T t{};
      __builtin_memcpy(&t, &u, sizeof(T));
      return t;
    }
  }
}

// Left out by MKPY_METAL_NO_MATH (a kernel compiled by NVRTC that names none of
// these functions; backend/cuda/parts.c).
#ifndef MKPY_METAL_NO_MATH
// ===========================================================================
// 5. Math, integer, relational and geometric functions
// ===========================================================================
//
// A program that defines MKPY_METAL_MATH_NAMES declares only the functions
// it names with MKPY_METAL_WANT_<name> (1): every overload of a name (scalar,
// half/bfloat, mixed, integer, component-wise) or none of them
// (backend/cuda/parts.c).  MK_WANT(name) is 1 or 0 in #if and in macros;
// `name` is pasted before the renames of mkpy_cuda_std.h can touch it.
#ifdef MKPY_METAL_MATH_NAMES
#define MK_WANT(name) MK_WANT_I(MKPY_METAL_WANT_##name)
#define MK_WANT_I(x) MK_WANT_II(x)
#define MK_WANT_II(x) MK_WANT_III(MK_WANT_PROBE_##x)
#define MK_WANT_III(...) MK_WANT_IV(__VA_ARGS__, 0, ~)
#define MK_WANT_IV(a, b, ...) b
#define MK_WANT_PROBE_1 ~, 1
#else
#define MK_WANT(name) 1
#define MK_WANT_I(x) 1
#endif
// Functions that call others of this section bring them (tests/test_cuda_compile.py checks the list).
#if MK_WANT(addsat) || MK_WANT(clamp) || MK_WANT(madsat) || MK_WANT(median3) || MK_WANT(min3) || MK_WANT(subsat)
#undef MKPY_METAL_WANT_min
#define MKPY_METAL_WANT_min 1
#endif
#if MK_WANT(addsat) || MK_WANT(clamp) || MK_WANT(madsat) || MK_WANT(max3) || MK_WANT(median3) || MK_WANT(subsat)
#undef MKPY_METAL_WANT_max
#define MKPY_METAL_WANT_max 1
#endif
#if MK_WANT(distance)
#undef MKPY_METAL_WANT_distance_squared
#define MKPY_METAL_WANT_distance_squared 1
#endif
#if MK_WANT(mad24)
#undef MKPY_METAL_WANT_mul24
#define MKPY_METAL_WANT_mul24 1
#endif
#if MK_WANT(madhi)
#undef MKPY_METAL_WANT_mulhi
#define MKPY_METAL_WANT_mulhi 1
#endif
#define MK_WHEN(c) MK_WHEN_I(c)
#define MK_WHEN_I(c) MK_WHEN_##c
#define MK_WHEN_1(...) __VA_ARGS__
#define MK_WHEN_0(...)
//
// Scalar overloads exist for float, half and bfloat (half/bfloat compute in
// float and round once), templates for the integer types, and a template per
// name that applies the scalar function component-wise to vectors (a scalar
// argument next to a vector is splatted).  Calls with two different scalar
// types (max(h, 0.0f), min(i, 3u), pow(x, 2)) go through a "mixed" template
// that converts both to their common type first.  precise:: and fast:: have
// the same functions (fast:: is as accurate as precise:: here).

namespace _mk {
// Common type of two scalar types, MSL style.
template <class A, class B, bool = is_hb<A>::value || is_hb<B>::value>
struct mixt {
  using type = typename sres<A, B>::type;
};
template <class A, class B>
struct mixt<A, B, false> {
  using type = std::conditional_t<std::is_floating_point<A>::value ||
                                      std::is_floating_point<B>::value,
                                  float, std::common_type_t<A, B>>;
};
template <class A, class B, class = void>
struct mix2 {};
template <class A, class B>
struct mix2<A, B,
            enable_if_t<is_num<A>::value && is_num<B>::value && !is_same<A, B>::value>> {
  using type = typename mixt<A, B>::type;
};
template <class A, class B, class C, class = void>
struct mix3 {};
template <class A, class B, class C>
struct mix3<A, B, C,
            enable_if_t<is_num<A>::value && is_num<B>::value && is_num<C>::value &&
                        !(is_same<A, B>::value && is_same<B, C>::value)>> {
  using type = typename mixt<typename mixt<A, B>::type, C>::type;
};

// Component-wise application: the first vector-like argument gives the element
// type and length; the others must be vectors of that length or scalars.
template <class A, class... R>
struct first_vec {
  using type = std::conditional_t<(vt<A>::n > 0), A, typename first_vec<R...>::type>;
};
template <class A>
struct first_vec<A> {
  using type = A;
};
template <class... A>
struct vargs {
  using F = typename first_vec<A...>::type;
  static constexpr int n = vt<F>::n;
  static constexpr bool ok =
      (n > 0) && (... && (vt<A>::n == n || (vt<A>::n == 0 && is_num<A>::value)));
};
template <class... A>
using vargs_t =
    enable_if_t<vargs<A...>::ok, vec<typename vt<typename vargs<A...>::F>::E, vargs<A...>::n>>;

constexpr float kInf = __builtin_huge_valf();
constexpr double kPi = 3.14159265358979323846;

inline float nan_f() { return __builtin_nanf(""); }
inline bool isnan_f(float x) { return (f2u(x) & 0x7fffffffu) > 0x7f800000u; }
inline bool isfinite_f(float x) { return (f2u(x) & 0x7fffffffu) < 0x7f800000u; }

// sin(pi x), cos(pi x), tan(pi x): reduced exactly, evaluated in double.
inline float sinpi_f(float x) {
  if (!isfinite_f(x)) return nan_f();
  float ax = __builtin_fabsf(x);
  if (ax >= 8388608.0f) return __builtin_copysignf(0.0f, x);  // integers
  float y = __builtin_fmodf(ax, 2.0f);                         // exact, [0, 2)
  bool neg = x < 0;
  if (y >= 1.0f) {
    y -= 1.0f;
    neg = !neg;
  }
  if (y == 0.0f) return __builtin_copysignf(0.0f, x);
  if (y > 0.5f) y = 1.0f - y;
  double r = y <= 0.25f ? __builtin_sin(kPi * y) : __builtin_cos(kPi * (0.5 - y));
  float f = float(r);
  return neg ? -f : f;
}
inline float cospi_f(float x) {
  if (!isfinite_f(x)) return nan_f();
  float ax = __builtin_fabsf(x);
  if (ax >= 16777216.0f) return 1.0f;  // even integers
  float y = __builtin_fmodf(ax, 2.0f);
  bool neg = false;
  if (y >= 1.0f) {
    y -= 1.0f;
    neg = true;
  }
  if (y > 0.5f) {
    y = 1.0f - y;
    neg = !neg;
  }
  if (y == 0.5f) return 0.0f;
  double r = y <= 0.25f ? __builtin_cos(kPi * y) : __builtin_sin(kPi * (0.5 - y));
  float f = float(r);
  return neg ? -f : f;
}
inline float tanpi_f(float x) {
  if (!isfinite_f(x)) return nan_f();
  float ax = __builtin_fabsf(x);
  float y = ax >= 8388608.0f ? 0.0f : __builtin_fmodf(ax, 1.0f);  // period 1
  bool odd = ax < 16777216.0f && __builtin_fmodf(ax, 2.0f) >= 1.0f;
  float f;
  if (y == 0.0f) {
    f = 0.0f;
    if (odd) f = -f;  // tanpi(n) = copysign(0, n) for even n, copysign(0, -n) for odd
  } else if (y == 0.5f) {
    f = odd ? -kInf : kInf;
  } else {
    bool neg = y > 0.5f;
    if (neg) y = 1.0f - y;
    double r = y <= 0.25f ? __builtin_tan(kPi * y) : 1.0 / __builtin_tan(kPi * (0.5 - y));
    f = float(r);
    if (neg) f = -f;
  }
  return x < 0 ? -f : f;
}
// x - floor(x), clamped below 1; fract(+-0) = +-0, fract(+-inf) = +-0.
inline float fract_f(float x) {
  if (isnan_f(x)) return x;
  if (!isfinite_f(x)) return __builtin_copysignf(0.0f, x);
  if (x == 0.0f) return x;
  return __builtin_fminf(x - __builtin_floorf(x), 0x1.fffffep-1f);
}
// nextafter on the 16-bit formats (both are sign-magnitude like float).
template <class H>
inline H nextafter16(H x, H y) {
  float fx = float(x), fy = float(y);
  if (fx != fx || fy != fy) return H(fx + fy);
  if (fx == fy) return y;
  if (fx == 0.0f) return H::from_bits(uint16_t((y.bits & 0x8000u) | 1u));
  return H::from_bits(uint16_t(((fx < fy) == (fx > 0.0f)) ? x.bits + 1u : x.bits - 1u));
}
}  // namespace _mk

// float overloads are functions; the half and bfloat ones are one template per
// name (H is half or bfloat), which is cheaper to parse and resolves the same.
#define MK_UN(name, expr) \
  MK_WHEN(MK_WANT_I(MKPY_METAL_WANT_##name))( \
  inline float name(float x) { return expr; }                          \
  template <class H, _mk::if_hb<H> = 0>                                 \
  inline H name(H x) {                                                  \
    return H(name(float(x)));                                           \
  } \
  )
#define MK_PRED(name, expr) \
  MK_WHEN(MK_WANT_I(MKPY_METAL_WANT_##name))( \
  inline bool name(float x) { return expr; }                           \
  template <class H, _mk::if_hb<H> = 0>                                 \
  inline bool name(H x) {                                               \
    return name(float(x));                                              \
  } \
  )
#define MK_BIN(name, expr) \
  MK_WHEN(MK_WANT_I(MKPY_METAL_WANT_##name))( \
  inline float name(float x, float y) { return expr; }                         \
  template <class H, _mk::if_hb<H> = 0>                                         \
  inline H name(H x, H y) {                                                     \
    return H(name(float(x), float(y)));                                         \
  }                                                                             \
  template <class A, class B, class C = typename _mk::mix2<A, B>::type>         \
  inline auto name(A x, B y) {                                                  \
    return name(C(x), C(y));                                                    \
  } \
  )
#define MK_TER(name, expr) \
  MK_WHEN(MK_WANT_I(MKPY_METAL_WANT_##name))( \
  inline float name(float x, float y, float z) { return expr; }                \
  template <class H, _mk::if_hb<H> = 0>                                         \
  inline H name(H x, H y, H z) {                                                \
    return H(name(float(x), float(y), float(z)));                               \
  }                                                                             \
  template <class A, class B, class C, class D = typename _mk::mix3<A, B, C>::type> \
  inline auto name(A x, B y, C z) {                                             \
    return name(D(x), D(y), D(z));                                              \
  } \
  )

// ---- integer functions (templates for all integer types but bool); declared
// before the float ones so that abs/min/max/clamp(int) resolve here.
#if MK_WANT(abs)
template <class T, _mk::if_int<T> = 0>
constexpr T abs(T x) {
  if constexpr (std::is_signed<T>::value)
    return x < 0 ? T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(x)) : x;
  else
    return x;
}
#endif
#if MK_WANT(min)
template <class T, _mk::if_int<T> = 0>
constexpr T min(T a, T b) {
  return b < a ? b : a;
}
#endif
#if MK_WANT(max)
template <class T, _mk::if_int<T> = 0>
constexpr T max(T a, T b) {
  return a < b ? b : a;
}
#endif
#if MK_WANT(clamp)
template <class T, _mk::if_int<T> = 0>
constexpr T clamp(T x, T lo, T hi) {
  return min(max(x, lo), hi);
}
#endif
#if MK_WANT(min3)
template <class T, _mk::if_int<T> = 0>
constexpr T min3(T a, T b, T c) {
  return min(min(a, b), c);
}
#endif
#if MK_WANT(max3)
template <class T, _mk::if_int<T> = 0>
constexpr T max3(T a, T b, T c) {
  return max(max(a, b), c);
}
#endif
#if MK_WANT(median3)
template <class T, _mk::if_int<T> = 0>
constexpr T median3(T a, T b, T c) {
  return max(min(a, b), min(max(a, b), c));
}
#endif
// |x - y| without overflow
#if MK_WANT(absdiff)
template <class T, _mk::if_int<T> = 0>
constexpr T absdiff(T x, T y) {
  using U = std::make_unsigned_t<T>;
  return T(x > y ? U(U(x) - U(y)) : U(U(y) - U(x)));
}
#endif
#if MK_WANT(addsat)
template <class T, _mk::if_int<T> = 0>
constexpr T addsat(T x, T y) {
  T r{};
  if (__builtin_add_overflow(x, y, &r))
    return (std::is_signed<T>::value && y < 0) ? numeric_limits<T>::min() : numeric_limits<T>::max();
  return r;
}
#endif
#if MK_WANT(subsat)
template <class T, _mk::if_int<T> = 0>
constexpr T subsat(T x, T y) {
  T r{};
  if (__builtin_sub_overflow(x, y, &r))
    return (std::is_signed<T>::value && y < 0) ? numeric_limits<T>::max() : numeric_limits<T>::min();
  return r;
}
#endif
// (x + y) >> 1 and (x + y + 1) >> 1 without overflow
#if MK_WANT(hadd)
template <class T, _mk::if_int<T> = 0>
constexpr T hadd(T x, T y) {
  return T((x >> 1) + (y >> 1) + (x & y & 1));
}
#endif
#if MK_WANT(rhadd)
template <class T, _mk::if_int<T> = 0>
constexpr T rhadd(T x, T y) {
  return T((x >> 1) + (y >> 1) + ((x | y) & 1));
}
#endif
#if MK_WANT(popcount)
template <class T, _mk::if_int<T> = 0>
constexpr T popcount(T x) {
  using U = std::make_unsigned_t<T>;
  if constexpr (sizeof(T) <= 4)
    return T(__builtin_popcount(uint32_t(U(x))));
  else
    return T(__builtin_popcountll(uint64_t(U(x))));
}
#endif
// clz(0) = ctz(0) = bit width
#if MK_WANT(clz)
template <class T, _mk::if_int<T> = 0>
constexpr T clz(T x) {
  using U = std::make_unsigned_t<T>;
  constexpr int W = int(sizeof(T) * 8);
  U u = U(x);
  if (!u) return T(W);
  if constexpr (W <= 32)
    return T(__builtin_clz(uint32_t(u)) - (32 - W));
  else
    return T(__builtin_clzll(uint64_t(u)));
}
#endif
#if MK_WANT(ctz)
template <class T, _mk::if_int<T> = 0>
constexpr T ctz(T x) {
  using U = std::make_unsigned_t<T>;
  constexpr int W = int(sizeof(T) * 8);
  U u = U(x);
  if (!u) return T(W);
  if constexpr (W <= 32)
    return T(__builtin_ctz(uint32_t(u)));
  else
    return T(__builtin_ctzll(uint64_t(u)));
}
#endif
#if MK_WANT(reverse_bits)
template <class T, _mk::if_int<T> = 0>
constexpr T reverse_bits(T x) {
  using U = std::make_unsigned_t<T>;
  if constexpr (sizeof(T) == 1)
    return T(__builtin_bitreverse8(U(x)));
  else if constexpr (sizeof(T) == 2)
    return T(__builtin_bitreverse16(U(x)));
  else if constexpr (sizeof(T) == 4)
    return T(__builtin_bitreverse32(U(x)));
  else
    return T(__builtin_bitreverse64(U(x)));
}
#endif
// high half of the full product
#if MK_WANT(mulhi)
template <class T, _mk::if_int<T> = 0>
constexpr T mulhi(T a, T b) {
  constexpr int W = int(sizeof(T) * 8);
  if constexpr (W <= 32) {
    using D = std::conditional_t<std::is_signed<T>::value, int64_t, uint64_t>;
    return T((D(a) * D(b)) >> W);
  } else {
    using D = std::conditional_t<std::is_signed<T>::value, __int128, unsigned __int128>;
    return T((D(a) * D(b)) >> 64);
  }
}
#endif
#if MK_WANT(madhi)
template <class T, _mk::if_int<T> = 0>
constexpr T madhi(T a, T b, T c) {
  using U = std::make_unsigned_t<T>;
  return T(U(mulhi(a, b)) + U(c));
}
#endif
// saturating a * b + c
#if MK_WANT(madsat)
template <class T, _mk::if_int<T> = 0>
constexpr T madsat(T a, T b, T c) {
  if constexpr (std::is_signed<T>::value) {
    __int128 r = __int128(a) * __int128(b) + __int128(c);
    if (r > __int128(numeric_limits<T>::max())) return numeric_limits<T>::max();
    if (r < __int128(numeric_limits<T>::min())) return numeric_limits<T>::min();
    return T(r);
  } else {
    using W = unsigned __int128;
    W p = W(a) * W(b);
    if (p > W(numeric_limits<T>::max())) return numeric_limits<T>::max();
    p += W(c);
    return p > W(numeric_limits<T>::max()) ? numeric_limits<T>::max() : T(p);
  }
}
#endif
// 24-bit multiply (operands use their low 24 bits, sign-extended for signed types)
#if MK_WANT(mul24)
template <class T, _mk::if_int<T> = 0>
constexpr T mul24(T a, T b) {
  using U = std::make_unsigned_t<T>;
  if constexpr (std::is_signed<T>::value) {
    int32_t x = int32_t(uint32_t(a) << 8) >> 8, y = int32_t(uint32_t(b) << 8) >> 8;
    return T(U(uint32_t(x) * uint32_t(y)));
  } else {
    return T(U((uint32_t(a) & 0xffffffu) * (uint32_t(b) & 0xffffffu)));
  }
}
#endif
#if MK_WANT(mad24)
template <class T, _mk::if_int<T> = 0>
constexpr T mad24(T a, T b, T c) {
  using U = std::make_unsigned_t<T>;
  return T(U(mul24(a, b)) + U(c));
}
#endif
// bits of v rotated left by i (mod width)
#if MK_WANT(rotate)
template <class T, _mk::if_int<T> = 0>
constexpr T rotate(T v, T i) {
  using U = std::make_unsigned_t<T>;
  constexpr unsigned W = sizeof(T) * 8;
  unsigned s = unsigned(U(i)) & (W - 1);
  U u = U(v);
  return T(U((u << s) | (u >> ((W - s) & (W - 1)))));
}
#endif
// bits [offset, offset + bits) of x in the low bits, sign-extended for signed
// types; 0 when bits == 0
#if MK_WANT(extract_bits)
template <class T, _mk::if_int<T> = 0>
constexpr T extract_bits(T x, uint offset, uint bits) {
  if (bits == 0) return T(0);
  uint64_t t = uint64_t(std::make_unsigned_t<T>(x)) << (64u - offset - bits);
  if constexpr (std::is_signed<T>::value)
    return T(int64_t(t) >> (64u - bits));
  else
    return T(t >> (64u - bits));
}
#endif
// base with bits [offset, offset + bits) replaced by the low bits of insert
#if MK_WANT(insert_bits)
template <class T, _mk::if_int<T> = 0>
constexpr T insert_bits(T base, T insert, uint offset, uint bits) {
  if (bits == 0) return base;
  uint64_t m = (bits >= 64u ? ~uint64_t(0) : ((uint64_t(1) << bits) - 1u)) << offset;
  using U = std::make_unsigned_t<T>;
  uint64_t r = (uint64_t(U(base)) & ~m) | ((uint64_t(U(insert)) << offset) & m);
  return T(U(r));
}
#endif

// ---- float / half / bfloat
MK_UN(abs, __builtin_fabsf(x))
MK_UN(fabs, __builtin_fabsf(x))
MK_UN(acos, __builtin_acosf(x))
MK_UN(acosh, __builtin_acoshf(x))
MK_UN(asin, __builtin_asinf(x))
MK_UN(asinh, __builtin_asinhf(x))
MK_UN(atan, __builtin_atanf(x))
MK_UN(atanh, __builtin_atanhf(x))
MK_UN(ceil, __builtin_ceilf(x))
MK_UN(cos, __builtin_cosf(x))
MK_UN(cosh, __builtin_coshf(x))
MK_UN(cospi, _mk::cospi_f(x))
MK_UN(exp, __builtin_expf(x))
MK_UN(exp2, __builtin_exp2f(x))
MK_UN(exp10, float(__builtin_pow(10.0, double(x))))
MK_UN(floor, __builtin_floorf(x))
MK_UN(log, __builtin_logf(x))
MK_UN(log2, __builtin_log2f(x))
MK_UN(log10, __builtin_log10f(x))
MK_UN(rint, __builtin_rintf(x))
MK_UN(round, __builtin_roundf(x))
MK_UN(rsqrt, float(1.0 / __builtin_sqrt(double(x))))
MK_UN(sin, __builtin_sinf(x))
MK_UN(sinh, __builtin_sinhf(x))
MK_UN(sinpi, _mk::sinpi_f(x))
MK_UN(sqrt, __builtin_sqrtf(x))
MK_UN(tan, __builtin_tanf(x))
MK_UN(tanh, __builtin_tanhf(x))
MK_UN(tanpi, _mk::tanpi_f(x))
MK_UN(trunc, __builtin_truncf(x))
MK_UN(saturate, __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f))
// 1 for x > 0, -1 for x < 0, +-0 for +-0, 0 for NaN
MK_UN(sign, x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (x == 0.0f ? x : 0.0f)))

#if MK_WANT(fract)
inline float fract(float x) { return _mk::fract_f(x); }
#endif
#if MK_WANT(fract)
inline half fract(half x) {  // stays below 1 after rounding to half
  half r = half(_mk::fract_f(float(x)));
  return float(r) >= 1.0f ? half::from_bits(0x3bff) : r;
}
#endif
#if MK_WANT(fract)
inline bfloat fract(bfloat x) {
  bfloat r = bfloat(_mk::fract_f(float(x)));
  return float(r) >= 1.0f ? bfloat::from_bits(0x3f7f) : r;
}
#endif

// erf is not in MSL; it is a template so that a kernel's own erf(float)
// (MLX ships one in erf.h) wins overload resolution instead of clashing.
#if MK_WANT(erf)
template <class T, enable_if_t<is_same<T, float>::value || _mk::is_hb<T>::value, int> = 0>
inline T erf(T x) {
  return T(__builtin_erff(float(x)));
}
#endif

MK_PRED(isnan, _mk::isnan_f(x))
MK_PRED(isinf, (_mk::f2u(x) & 0x7fffffffu) == 0x7f800000u)
MK_PRED(isfinite, _mk::isfinite_f(x))
MK_PRED(signbit, (_mk::f2u(x) >> 31) != 0)
#if MK_WANT(isnormal)
inline bool isnormal(float x) {
  uint32_t e = (_mk::f2u(x) >> 23) & 0xffu;
  return e != 0 && e != 0xffu;
}
#endif
#if MK_WANT(isnormal)
inline bool isnormal(half x) {
  uint32_t e = (x.bits >> 10) & 0x1fu;
  return e != 0 && e != 0x1fu;
}
#endif
#if MK_WANT(isnormal)
inline bool isnormal(bfloat x) { return isnormal(float(x)); }
#endif
#if MK_WANT(isordered)
inline bool isordered(float x, float y) { return !_mk::isnan_f(x) && !_mk::isnan_f(y); }
#endif
#if MK_WANT(isunordered)
inline bool isunordered(float x, float y) { return _mk::isnan_f(x) || _mk::isnan_f(y); }
#endif
#if MK_WANT(isordered)
inline bool isordered(half x, half y) { return isordered(float(x), float(y)); }
#endif
#if MK_WANT(isunordered)
inline bool isunordered(half x, half y) { return isunordered(float(x), float(y)); }
#endif
#if MK_WANT(isordered)
inline bool isordered(bfloat x, bfloat y) { return isordered(float(x), float(y)); }
#endif
#if MK_WANT(isunordered)
inline bool isunordered(bfloat x, bfloat y) { return isunordered(float(x), float(y)); }
#endif

#if MK_WANT(ilogb)
inline int ilogb(float x) { return __builtin_ilogbf(x); }
#endif
#if MK_WANT(ilogb)
inline int ilogb(half x) { return __builtin_ilogbf(float(x)); }
#endif
#if MK_WANT(ilogb)
inline int ilogb(bfloat x) { return __builtin_ilogbf(float(x)); }
#endif
#if MK_WANT(ldexp)
inline float ldexp(float x, int k) { return __builtin_ldexpf(x, k); }
#endif
#if MK_WANT(ldexp)
inline half ldexp(half x, int k) { return half(__builtin_ldexpf(float(x), k)); }
#endif
#if MK_WANT(ldexp)
inline bfloat ldexp(bfloat x, int k) { return bfloat(__builtin_ldexpf(float(x), k)); }
#endif
#if MK_WANT(frexp)
inline float frexp(float x, int& e) { return __builtin_frexpf(x, &e); }
#endif
#if MK_WANT(frexp)
inline half frexp(half x, int& e) { return half(__builtin_frexpf(float(x), &e)); }
#endif
#if MK_WANT(frexp)
inline bfloat frexp(bfloat x, int& e) { return bfloat(__builtin_frexpf(float(x), &e)); }
#endif
#if MK_WANT(modf)
inline float modf(float x, float& ip) { return __builtin_modff(x, &ip); }
#endif
#if MK_WANT(modf)
inline half modf(half x, half& ip) {
  float i = 0.0f, f = __builtin_modff(float(x), &i);
  ip = half(i);
  return half(f);
}
#endif
#if MK_WANT(modf)
inline bfloat modf(bfloat x, bfloat& ip) {
  float i = 0.0f, f = __builtin_modff(float(x), &i);
  ip = bfloat(i);
  return bfloat(f);
}
#endif
// returns sin(x), stores cos(x)
#if MK_WANT(sincos)
inline float sincos(float x, float& c) {
  c = __builtin_cosf(x);
  return __builtin_sinf(x);
}
#endif
#if MK_WANT(sincos)
inline half sincos(half x, half& c) {
  c = half(__builtin_cosf(float(x)));
  return half(__builtin_sinf(float(x)));
}
#endif
#if MK_WANT(sincos)
inline bfloat sincos(bfloat x, bfloat& c) {
  c = bfloat(__builtin_cosf(float(x)));
  return bfloat(__builtin_sinf(float(x)));
}
#endif

// max/min/fmax/fmin: if one argument is NaN the other is returned.
MK_BIN(fmax, __builtin_fmaxf(x, y))
MK_BIN(fmin, __builtin_fminf(x, y))
MK_BIN(max, __builtin_fmaxf(x, y))
MK_BIN(min, __builtin_fminf(x, y))
MK_BIN(atan2, __builtin_atan2f(x, y))
MK_BIN(copysign, __builtin_copysignf(x, y))
MK_BIN(fdim, __builtin_fdimf(x, y))
MK_BIN(fmod, __builtin_fmodf(x, y))
MK_BIN(pow, __builtin_powf(x, y))
MK_BIN(powr, x < 0.0f ? _mk::nan_f() : __builtin_powf(x, y))
MK_BIN(divide, x / y)
MK_BIN(step, y < x ? 0.0f : 1.0f)  // step(edge, x)
#if MK_WANT(nextafter)
inline float nextafter(float x, float y) { return __builtin_nextafterf(x, y); }
#endif
#if MK_WANT(nextafter)
inline half nextafter(half x, half y) { return _mk::nextafter16(x, y); }
#endif
#if MK_WANT(nextafter)
inline bfloat nextafter(bfloat x, bfloat y) { return _mk::nextafter16(x, y); }
#endif
#if MK_WANT(nextafter)
template <class A, class B, class C = typename _mk::mix2<A, B>::type>
inline auto nextafter(A x, B y) {
  return nextafter(C(x), C(y));
}
#endif

MK_TER(clamp, __builtin_fminf(__builtin_fmaxf(x, y), z))
MK_TER(mix, x + (y - x) * z)
MK_TER(smoothstep, [](float e0, float e1, float v) {
  float t = __builtin_fminf(__builtin_fmaxf((v - e0) / (e1 - e0), 0.0f), 1.0f);
  return t * t * (3.0f - 2.0f * t);
}(x, y, z))
MK_TER(fmax3, __builtin_fmaxf(__builtin_fmaxf(x, y), z))
MK_TER(fmin3, __builtin_fminf(__builtin_fminf(x, y), z))
MK_TER(max3, __builtin_fmaxf(__builtin_fmaxf(x, y), z))
MK_TER(min3, __builtin_fminf(__builtin_fminf(x, y), z))
MK_TER(fmedian3, __builtin_fmaxf(__builtin_fminf(x, y), __builtin_fminf(__builtin_fmaxf(x, y), z)))
MK_TER(median3, __builtin_fmaxf(__builtin_fminf(x, y), __builtin_fminf(__builtin_fmaxf(x, y), z)))
// fma: one rounding.  For half/bfloat the exact product plus the addend is
// formed in double and rounded to odd, then to nearest: correctly rounded.
#if MK_WANT(fma)
inline float fma(float x, float y, float z) { return __builtin_fmaf(x, y, z); }
#endif
#if MK_WANT(fma)
inline half fma(half x, half y, half z) {
  return half(_mk::d2f_odd(double(float(x)) * double(float(y)) + double(float(z))));
}
#endif
#if MK_WANT(fma)
inline bfloat fma(bfloat x, bfloat y, bfloat z) {
  return bfloat(_mk::d2f_odd(double(float(x)) * double(float(y)) + double(float(z))));
}
#endif
#if MK_WANT(fma)
template <class A, class B, class C, class D = typename _mk::mix3<A, B, C>::type>
inline auto fma(A x, B y, C z) {
  return fma(D(x), D(y), D(z));
}
#endif

// ---- relational
#if MK_WANT(all)
constexpr bool all(bool b) { return b; }
#endif
#if MK_WANT(any)
constexpr bool any(bool b) { return b; }
#endif
#if MK_WANT(all)
template <class A, enable_if_t<(_mk::vt<A>::n > 0), int> = 0>
constexpr bool all(const A& a) {
  for (int i = 0; i < _mk::vt<A>::n; ++i)
    if (!bool(_mk::at(a, i))) return false;
  return true;
}
#endif
#if MK_WANT(any)
template <class A, enable_if_t<(_mk::vt<A>::n > 0), int> = 0>
constexpr bool any(const A& a) {
  for (int i = 0; i < _mk::vt<A>::n; ++i)
    if (bool(_mk::at(a, i))) return true;
  return false;
}
#endif
// select(a, b, c) = c ? b : a (component-wise for vectors)
#if MK_WANT(select)
template <class T, _mk::if_num<T> = 0>
constexpr T select(T a, T b, bool c) {
  return c ? b : a;
}
#endif
#if MK_WANT(select)
template <class A, class B, class C = typename _mk::mix2<A, B>::type>
constexpr C select(A a, B b, bool c) {
  return c ? C(b) : C(a);
}
#endif
#if MK_WANT(select)
template <class A, class B, class C, class V = _mk::vargs_t<A, B>>
constexpr V select(const A& a, const B& b, const C& c) {
  V x(a), y(b), r{};
  vec<bool, V::size> m(c);
  for (int i = 0; i < V::size; ++i) r[i] = m[i] ? y[i] : x[i];
  return r;
}
#endif

// ---- component-wise versions of everything above, for vectors.  Declared
// after all scalar overloads so that they find them.
#define MK_VEC1(name) \
  MK_WHEN(MK_WANT_I(MKPY_METAL_WANT_##name))( \
  template <class A, class V = _mk::vargs_t<A>>                         \
  inline auto name(const A& a) {                                        \
    V x(a);                                                             \
    vec<decltype(name(x[0])), V::size> r{};                             \
    for (int i = 0; i < V::size; ++i) r[i] = name(x[i]);                \
    return r;                                                           \
  } \
  )
#define MK_VEC2(name) \
  MK_WHEN(MK_WANT_I(MKPY_METAL_WANT_##name))( \
  template <class A, class B, class V = _mk::vargs_t<A, B>>             \
  inline auto name(const A& a, const B& b) {                            \
    V x(a), y(b);                                                       \
    vec<decltype(name(x[0], y[0])), V::size> r{};                       \
    for (int i = 0; i < V::size; ++i) r[i] = name(x[i], y[i]);          \
    return r;                                                           \
  } \
  )
#define MK_VEC3(name) \
  MK_WHEN(MK_WANT_I(MKPY_METAL_WANT_##name))( \
  template <class A, class B, class C, class V = _mk::vargs_t<A, B, C>> \
  inline auto name(const A& a, const B& b, const C& c) {                \
    V x(a), y(b), z(c);                                                 \
    vec<decltype(name(x[0], y[0], z[0])), V::size> r{};                 \
    for (int i = 0; i < V::size; ++i) r[i] = name(x[i], y[i], z[i]);    \
    return r;                                                           \
  } \
  )
MK_VEC1(abs)
MK_VEC1(fabs)
MK_VEC1(acos)
MK_VEC1(acosh)
MK_VEC1(asin)
MK_VEC1(asinh)
MK_VEC1(atan)
MK_VEC1(atanh)
MK_VEC1(ceil)
MK_VEC1(cos)
MK_VEC1(cosh)
MK_VEC1(cospi)
MK_VEC1(exp)
MK_VEC1(exp2)
MK_VEC1(exp10)
MK_VEC1(floor)
MK_VEC1(fract)
MK_VEC1(log)
MK_VEC1(log2)
MK_VEC1(log10)
MK_VEC1(rint)
MK_VEC1(round)
MK_VEC1(rsqrt)
MK_VEC1(sin)
MK_VEC1(sinh)
MK_VEC1(sinpi)
MK_VEC1(sqrt)
MK_VEC1(tan)
MK_VEC1(tanh)
MK_VEC1(tanpi)
MK_VEC1(trunc)
MK_VEC1(saturate)
MK_VEC1(sign)
MK_VEC1(erf)
MK_VEC1(isnan)
MK_VEC1(isinf)
MK_VEC1(isfinite)
MK_VEC1(isnormal)
MK_VEC1(signbit)
MK_VEC1(ilogb)
MK_VEC1(popcount)
MK_VEC1(clz)
MK_VEC1(ctz)
MK_VEC1(reverse_bits)
MK_VEC2(fmax)
MK_VEC2(fmin)
MK_VEC2(max)
MK_VEC2(min)
MK_VEC2(atan2)
MK_VEC2(copysign)
MK_VEC2(fdim)
MK_VEC2(fmod)
MK_VEC2(pow)
MK_VEC2(powr)
MK_VEC2(divide)
MK_VEC2(step)
MK_VEC2(nextafter)
MK_VEC2(isordered)
MK_VEC2(isunordered)
MK_VEC2(absdiff)
MK_VEC2(addsat)
MK_VEC2(subsat)
MK_VEC2(hadd)
MK_VEC2(rhadd)
MK_VEC2(mulhi)
MK_VEC2(mul24)
MK_VEC2(rotate)
MK_VEC3(clamp)
MK_VEC3(mix)
MK_VEC3(smoothstep)
MK_VEC3(fma)
MK_VEC3(fmax3)
MK_VEC3(fmin3)
MK_VEC3(max3)
MK_VEC3(min3)
MK_VEC3(fmedian3)
MK_VEC3(median3)
MK_VEC3(madhi)
MK_VEC3(madsat)
MK_VEC3(mad24)
MK_VEC3(extract_bits)
#undef MK_VEC1
#undef MK_VEC2
#undef MK_VEC3
#undef MK_UN
#undef MK_PRED
#undef MK_BIN
#undef MK_TER

#if MK_WANT(insert_bits)
template <class A, class B, class C, class D, class V = _mk::vargs_t<A, B, C, D>>
inline V insert_bits(const A& base, const B& ins, const C& offset, const D& bits) {
  V x(base), y(ins), r{};
  vec<uint, V::size> o(offset), n(bits);
  for (int i = 0; i < V::size; ++i) r[i] = insert_bits(x[i], y[i], o[i], n[i]);
  return r;
}
#endif
#if MK_WANT(ldexp)
template <class A, class K, class V = _mk::vargs_t<A>>
inline V ldexp(const A& a, const K& k) {
  V x(a), r{};
  vec<int, V::size> e(k);
  for (int i = 0; i < V::size; ++i) r[i] = ldexp(x[i], e[i]);
  return r;
}
#endif
#if MK_WANT(frexp)
template <class T, int N>
inline vec<T, N> frexp(const vec<T, N>& x, vec<int, N>& e) {
  vec<T, N> r{};
  for (int i = 0; i < N; ++i) r[i] = frexp(x[i], e[i]);
  return r;
}
#endif
#if MK_WANT(modf)
template <class T, int N>
inline vec<T, N> modf(const vec<T, N>& x, vec<T, N>& ip) {
  vec<T, N> r{};
  for (int i = 0; i < N; ++i) r[i] = modf(x[i], ip[i]);
  return r;
}
#endif
#if MK_WANT(sincos)
template <class T, int N>
inline vec<T, N> sincos(const vec<T, N>& x, vec<T, N>& c) {
  vec<T, N> r{};
  for (int i = 0; i < N; ++i) r[i] = sincos(x[i], c[i]);
  return r;
}
#endif

// ---- geometric (float, half, bfloat vectors).  Sums are accumulated in float
// and rounded once to the element type.
namespace _mk {
template <class V>
inline float dotf(const V& x, const V& y) {
  float s = 0.0f;
  for (int i = 0; i < V::size; ++i) s += float(x[i]) * float(y[i]);
  return s;
}
}  // namespace _mk
#if MK_WANT(dot)
template <class A, class B, class V = _mk::vargs_t<A, B>>
inline typename V::elem_t dot(const A& a, const B& b) {
  V x(a), y(b);
  return typename V::elem_t(_mk::dotf(x, y));
}
#endif
#if MK_WANT(length_squared)
template <class A, class V = _mk::vargs_t<A>>
inline typename V::elem_t length_squared(const A& a) {
  V x(a);
  return typename V::elem_t(_mk::dotf(x, x));
}
#endif
#if MK_WANT(length)
template <class A, class V = _mk::vargs_t<A>>
inline typename V::elem_t length(const A& a) {
  V x(a);
  return typename V::elem_t(__builtin_sqrtf(_mk::dotf(x, x)));
}
#endif
#if MK_WANT(distance_squared)
template <class A, class B, class V = _mk::vargs_t<A, B>>
inline typename V::elem_t distance_squared(const A& a, const B& b) {
  V x(a), y(b);
  float s = 0.0f;
  for (int i = 0; i < V::size; ++i) {
    float d = float(x[i]) - float(y[i]);
    s += d * d;
  }
  return typename V::elem_t(s);
}
#endif
#if MK_WANT(distance)
template <class A, class B, class V = _mk::vargs_t<A, B>>
inline typename V::elem_t distance(const A& a, const B& b) {
  return typename V::elem_t(__builtin_sqrtf(float(distance_squared(a, b))));
}
#endif
#if MK_WANT(normalize)
template <class A, class V = _mk::vargs_t<A>>
inline V normalize(const A& a) {
  V x(a), r{};
  float l = __builtin_sqrtf(_mk::dotf(x, x));
  for (int i = 0; i < V::size; ++i) r[i] = typename V::elem_t(float(x[i]) / l);
  return r;
}
#endif
#if MK_WANT(cross)
template <class A, class B, class V = _mk::vargs_t<A, B>>
inline V cross(const A& a, const B& b) {
  static_assert(V::size == 3, "cross takes 3-component vectors");
  V x(a), y(b);
  return V(x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0]);
}
#endif
// i - 2 dot(n, i) n
#if MK_WANT(reflect)
template <class A, class B, class V = _mk::vargs_t<A, B>>
inline V reflect(const A& i, const B& n) {
  V x(i), y(n), r{};
  float d = _mk::dotf(y, x);
  for (int k = 0; k < V::size; ++k)
    r[k] = typename V::elem_t(float(x[k]) - 2.0f * d * float(y[k]));
  return r;
}
#endif
#if MK_WANT(refract)
template <class A, class B, class E, class V = _mk::vargs_t<A, B>>
inline V refract(const A& i, const B& n, E eta_) {
  V x(i), y(n), r{};
  float eta = float(eta_), d = _mk::dotf(y, x);
  float k = 1.0f - eta * eta * (1.0f - d * d);
  if (k < 0.0f) return r;
  float s = eta * d + __builtin_sqrtf(k);
  for (int j = 0; j < V::size; ++j)
    r[j] = typename V::elem_t(eta * float(x[j]) - s * float(y[j]));
  return r;
}
#endif
// dot(nref, i) < 0 ? n : -n
#if MK_WANT(faceforward)
template <class A, class B, class C, class V = _mk::vargs_t<A, B, C>>
inline V faceforward(const A& n, const B& i, const C& nref) {
  V x(n), y(i), z(nref);
  return _mk::dotf(z, y) < 0.0f ? x : V(-x);
}
#endif

#undef MK_WANT
#undef MK_WANT_I
#ifdef MKPY_METAL_MATH_NAMES
#undef MK_WANT_II
#undef MK_WANT_III
#undef MK_WANT_IV
#undef MK_WANT_PROBE_1
#endif
#undef MK_WHEN
#undef MK_WHEN_I
#undef MK_WHEN_1
#undef MK_WHEN_0
#endif  // MKPY_METAL_NO_MATH

namespace precise {
using namespace ::metal;
}
namespace fast {
using namespace ::metal;
}

// ===========================================================================
// 6. Reserved: atomics, barriers, SIMD-group functions.
// ===========================================================================
// Provided elsewhere (not by this section's author).  This header defines none
// of these names, so they can be added here or in an included header without
// clashes: atomic<T>, atomic_int, atomic_uint, atomic_bool, atomic_float,
// memory_order*, atomic_load_explicit/atomic_store_explicit/atomic_fetch_*,
// threadgroup_barrier, simdgroup_barrier, mem_flags, simd_sum, simd_max,
// simd_min, simd_prod, simd_shuffle*, simd_broadcast*, simd_prefix_*,
// simd_ballot, simd_all, simd_any, quad_*.
// MLX's utils.h also defines 64-bit/bool/complex64_t overloads of
// simd_shuffle_down, simd_shuffle_up, simd_shuffle_and_fill_up and
// simd_shuffle in the global namespace; they belong with the SIMD functions.

}  // namespace metal

using namespace metal;

// ===========================================================================
// 7. MSL constants
// ===========================================================================
#ifndef INFINITY
#define INFINITY __builtin_huge_valf()
#endif
#ifndef NAN
#define NAN __builtin_nanf("")
#endif
#ifndef HUGE_VALF
#define HUGE_VALF __builtin_huge_valf()
#endif
#ifndef MAXFLOAT
#define MAXFLOAT FLT_MAX
#endif
#define HUGE_VALH (::metal::half::from_bits(0x7c00))
#define MAXHALF (::metal::half::from_bits(0x7bff))
#define HALF_MAX (::metal::half::from_bits(0x7bff))
#define HALF_MIN (::metal::half::from_bits(0x0400))
#define HALF_EPSILON (::metal::half::from_bits(0x1400))
#define HALF_DIG 3
#define HALF_MANT_DIG 11
#define HALF_MAX_EXP 16
#define HALF_MIN_EXP (-13)
#define HALF_MAX_10_EXP 4
#define HALF_MIN_10_EXP (-4)
#define HALF_RADIX 2
#define M_E_F 2.71828182845904523536028747135266250f
#define M_LOG2E_F 1.44269504088896340735992468100189214f
#define M_LOG10E_F 0.434294481903251827651128918916605082f
#define M_LN2_F 0.693147180559945309417232121458176568f
#define M_LN10_F 2.30258509299404568401799145468436421f
#define M_PI_F 3.14159265358979323846264338327950288f
#define M_PI_2_F 1.57079632679489661923132169163975144f
#define M_PI_4_F 0.785398163397448309615660845819875721f
#define M_1_PI_F 0.318309886183790671537767526745028724f
#define M_2_PI_F 0.636619772367581343075535053490057448f
#define M_2_SQRTPI_F 1.12837916709551257389615890312154517f
#define M_SQRT2_F 1.41421356237309504880168872420969808f
#define M_SQRT1_2_F 0.707106781186547524400844362104849039f
#define M_E_H (::metal::half(M_E_F))
#define M_LOG2E_H (::metal::half(M_LOG2E_F))
#define M_LOG10E_H (::metal::half(M_LOG10E_F))
#define M_LN2_H (::metal::half(M_LN2_F))
#define M_LN10_H (::metal::half(M_LN10_F))
#define M_PI_H (::metal::half(M_PI_F))
#define M_PI_2_H (::metal::half(M_PI_2_F))
#define M_PI_4_H (::metal::half(M_PI_4_F))
#define M_1_PI_H (::metal::half(M_1_PI_F))
#define M_2_PI_H (::metal::half(M_2_PI_F))
#define M_2_SQRTPI_H (::metal::half(M_2_SQRTPI_F))
#define M_SQRT2_H (::metal::half(M_SQRT2_F))
#define M_SQRT1_2_H (::metal::half(M_SQRT1_2_F))

// ===========================================================================
// 8. MLX kernel utilities (mlx/backend/metal/kernels/utils.h, complex.h,
//    bf16.h, defines.h): what MLX puts in front of every metal_kernel source.
//    Global namespace, as in MLX.  Define MKPY_METAL_NO_MLX to leave it out.
// ===========================================================================
#if defined(MKPY_METAL_NO_MATH) && !defined(MKPY_METAL_NO_MLX)
#error "MLX's utilities need the math functions (MKPY_METAL_NO_MATH)"
#endif
#ifndef MKPY_METAL_NO_MLX

#ifndef METAL_FUNC
#define METAL_FUNC inline
#endif
#ifndef MTL_CONST
#define MTL_CONST
#endif
#ifndef MLX_MTL_PRAGMA_UNROLL
#define MLX_MTL_PRAGMA_UNROLL
#endif

static constexpr int MAX_REDUCE_SPECIALIZED_DIMS = 4;
static constexpr int REDUCE_N_READS = 4;
static constexpr int REDUCE_N_WRITES = 4;
static constexpr int SOFTMAX_N_READS = 4;
static constexpr int RMS_N_READS = 4;
static constexpr int RMS_LOOPED_LIMIT = 4096;

inline uint16_t bfloat16_to_uint16(const bfloat16_t x) { return as_type<uint16_t>(x); }
inline bfloat16_t uint16_to_bfloat16(const uint16_t x) { return as_type<bfloat16_t>(x); }

// ---- complex64_t (MLX complex.h semantics)
struct complex64_t;
template <class T>
constexpr bool can_convert_to_complex64 =
    !is_same_v<T, complex64_t> && is_convertible_v<T, float>;
template <class T>
constexpr bool can_convert_from_complex64 =
    !is_same_v<T, complex64_t> &&
    (is_convertible_v<float, T> || is_convertible_v<bfloat16_t, T>);

struct complex64_t {
  float real;
  float imag;
  constexpr complex64_t(float re, float im) : real(re), imag(im) {}
  constexpr complex64_t() : real(0), imag(0) {}
  template <class T, enable_if_t<can_convert_to_complex64<T>, int> = 0>
  constexpr complex64_t(T x) : real(float(x)), imag(0) {}
  template <class T, enable_if_t<can_convert_from_complex64<T>, int> = 0>
  constexpr operator T() const {
    return static_cast<T>(real);
  }
};
constexpr complex64_t operator-(complex64_t x) { return {-x.real, -x.imag}; }
// ordering: by real part, then imaginary part
constexpr bool operator>=(complex64_t a, complex64_t b) {
  return a.real > b.real || (a.real == b.real && a.imag >= b.imag);
}
constexpr bool operator>(complex64_t a, complex64_t b) {
  return a.real > b.real || (a.real == b.real && a.imag > b.imag);
}
constexpr bool operator<=(complex64_t a, complex64_t b) { return b >= a; }
constexpr bool operator<(complex64_t a, complex64_t b) { return b > a; }
constexpr bool operator==(complex64_t a, complex64_t b) {
  return a.real == b.real && a.imag == b.imag;
}
constexpr bool operator!=(complex64_t a, complex64_t b) { return !(a == b); }
constexpr complex64_t operator+(complex64_t a, complex64_t b) {
  return {a.real + b.real, a.imag + b.imag};
}
constexpr complex64_t operator+(float a, complex64_t b) { return {a + b.real, b.imag}; }
constexpr complex64_t operator+(complex64_t a, float b) { return {a.real + b, a.imag}; }
constexpr complex64_t operator-(complex64_t a, complex64_t b) {
  return {a.real - b.real, a.imag - b.imag};
}
constexpr complex64_t operator-(float a, complex64_t b) { return {a - b.real, -b.imag}; }
constexpr complex64_t operator-(complex64_t a, float b) { return {a.real - b, a.imag}; }
constexpr complex64_t operator*(complex64_t a, complex64_t b) {
  return {a.real * b.real - a.imag * b.imag, a.real * b.imag + a.imag * b.real};
}
constexpr complex64_t operator/(complex64_t a, complex64_t b) {
  float d = b.real * b.real + b.imag * b.imag;
  return {(a.real * b.real + a.imag * b.imag) / d, (a.imag * b.real - a.real * b.imag) / d};
}
constexpr complex64_t operator/(float a, complex64_t b) {
  float d = b.real * b.real + b.imag * b.imag;
  return {a * b.real / d, -a * b.imag / d};
}
// component-wise remainder with the sign of the divisor (Python's %)
constexpr complex64_t operator%(complex64_t a, complex64_t b) {
  float re = a.real - b.real * float(int64_t(a.real / b.real));
  float im = a.imag - b.imag * float(int64_t(a.imag / b.imag));
  if (re != 0 && ((re < 0) != (b.real < 0))) re += b.real;
  if (im != 0 && ((im < 0) != (b.imag < 0))) im += b.imag;
  return {re, im};
}
constexpr complex64_t& operator+=(complex64_t& a, complex64_t b) {
  a.real += b.real;
  a.imag += b.imag;
  return a;
}
constexpr complex64_t& operator-=(complex64_t& a, complex64_t b) { return a = a - b; }
constexpr complex64_t& operator*=(complex64_t& a, complex64_t b) { return a = a * b; }
constexpr complex64_t& operator/=(complex64_t& a, complex64_t b) { return a = a / b; }

// ---- Limits<T>: max/min are +-inf for floating types, the range otherwise.
template <class U>
struct WorkPerThread {
  static_assert(sizeof(U) <= 8, "Type too large");
  static constexpr int n = 8 / sizeof(U);
};

template <class U>
struct Limits {
  static constexpr U max = metal::numeric_limits<U>::max();
  static constexpr U min = metal::numeric_limits<U>::min();
  static constexpr U finite_max = metal::numeric_limits<U>::max();
  static constexpr U finite_min = metal::numeric_limits<U>::min();
};
#define MK_FLOAT_LIMITS(T)                                              \
  template <>                                                           \
  struct Limits<T> {                                                    \
    static constexpr T max = metal::numeric_limits<T>::infinity();      \
    static constexpr T min = -metal::numeric_limits<T>::infinity();     \
    static constexpr T finite_max = metal::numeric_limits<T>::max();    \
    static constexpr T finite_min = -metal::numeric_limits<T>::max();   \
  };
MK_FLOAT_LIMITS(half)
MK_FLOAT_LIMITS(float)
MK_FLOAT_LIMITS(bfloat16_t)
#undef MK_FLOAT_LIMITS
template <>
struct Limits<bool> {
  static constexpr bool max = true;
  static constexpr bool min = false;
};
template <>
struct Limits<complex64_t> {
  static constexpr complex64_t max = complex64_t(__builtin_huge_valf(), __builtin_huge_valf());
  static constexpr complex64_t min = complex64_t(-__builtin_huge_valf(), -__builtin_huge_valf());
};

// ---- indexing.  As in MLX, elem_to_loc's index type IdxT is deduced from the
// element argument (a uint elem gives a uint location computed in uint
// arithmetic); write elem_to_loc<int64_t>(...) for 64-bit locations.
template <class IdxT = int64_t>
METAL_FUNC IdxT elem_to_loc(IdxT elem, const int* shape, const int64_t* strides, int ndim) {
  IdxT loc = 0;
  for (int d = ndim - 1; d >= 0 && elem > 0; --d) {
    loc += (elem % shape[d]) * IdxT(strides[d]);
    elem /= shape[d];
  }
  return loc;
}
// grid form: x walks the last dimension, y the one before, z all the others
template <class IdxT = int64_t>
METAL_FUNC IdxT elem_to_loc(uint3 elem, const int* shape, const int64_t* strides, int ndim) {
  IdxT loc = elem.x * IdxT(strides[ndim - 1]);
  if (ndim >= 2) loc += elem.y * IdxT(strides[ndim - 2]);
  for (int d = ndim - 3; d >= 0; --d) {
    loc += (elem.z % shape[d]) * IdxT(strides[d]);
    elem.z /= shape[d];
  }
  return loc;
}
template <class IdxT = int64_t>
METAL_FUNC IdxT elem_to_loc_1(uint elem, const int64_t& stride) {
  return elem * IdxT(stride);
}
template <class IdxT = int64_t>
METAL_FUNC IdxT elem_to_loc_2(uint2 elem, const int64_t strides[2]) {
  return elem.x * IdxT(strides[1]) + elem.y * IdxT(strides[0]);
}
template <class IdxT = int64_t>
METAL_FUNC IdxT elem_to_loc_3(uint3 elem, const int64_t strides[3]) {
  return elem.x * IdxT(strides[2]) + elem.y * IdxT(strides[1]) + elem.z * IdxT(strides[0]);
}
template <class IdxT = int64_t>
METAL_FUNC vec<IdxT, 2> elem_to_loc_2_nd(uint3 elem, const int* shape, const int64_t* a_strides,
                                         const int64_t* b_strides, int ndim) {
  vec<IdxT, 2> loc = {IdxT(elem.x * IdxT(a_strides[ndim - 1]) + IdxT(elem.y) * IdxT(a_strides[ndim - 2])),
                      IdxT(elem.x * IdxT(b_strides[ndim - 1]) + elem.y * IdxT(b_strides[ndim - 2]))};
  for (int d = ndim - 3; d >= 0; --d) {
    uint l = elem.z % shape[d];
    loc.x += l * IdxT(a_strides[d]);
    loc.y += l * IdxT(b_strides[d]);
    elem.z /= shape[d];
  }
  return loc;
}
template <class IdxT = int64_t>
METAL_FUNC vec<IdxT, 3> elem_to_loc_3_nd(uint3 elem, const int* shape, const int64_t* a_strides,
                                         const int64_t* b_strides, const int64_t* c_strides,
                                         int ndim) {
  vec<IdxT, 3> loc = {IdxT(elem.x * IdxT(a_strides[ndim - 1])) + IdxT(elem.y * IdxT(a_strides[ndim - 2])),
                      IdxT(elem.x * IdxT(b_strides[ndim - 1])) + IdxT(elem.y * IdxT(b_strides[ndim - 2])),
                      IdxT(elem.x * IdxT(c_strides[ndim - 1])) + IdxT(elem.y * IdxT(c_strides[ndim - 2]))};
  for (int d = ndim - 3; d >= 0; --d) {
    uint l = elem.z % shape[d];
    loc.x += l * IdxT(a_strides[d]);
    loc.y += l * IdxT(b_strides[d]);
    loc.z += l * IdxT(c_strides[d]);
    elem.z /= shape[d];
  }
  return loc;
}

// Walks the locations of consecutive elements of a strided array.
template <int DIM, class OffsetT = size_t, bool General = true>
struct LoopedElemToLoc {
  int dim;
  LoopedElemToLoc<DIM - 1, OffsetT, General> inner_looper;
  OffsetT offset{0};
  int index{0};

  LoopedElemToLoc(int dim_) : dim(dim_), inner_looper(dim_ - 1) {}

  void next(const int* shape, const int64_t* strides) {
    if (dim == 0) return;
    index++;
    offset += OffsetT(strides[dim - 1]);
    if (index >= shape[dim - 1]) {
      index = 0;
      inner_looper.next(shape, strides);
      offset = inner_looper.offset;
    }
  }

  void next(int n, const int* shape, const int64_t* strides) {
    if (dim == 0) return;
    index += n;
    offset += n * OffsetT(strides[dim - 1]);
    if (index >= shape[dim - 1]) {
      int extra = index - shape[dim - 1];
      if (extra >= shape[dim - 1]) {
        inner_looper.next(1 + extra / shape[dim - 1], shape, strides);
        extra = extra % shape[dim - 1];
      } else {
        inner_looper.next(shape, strides);
      }
      index = 0;
      offset = inner_looper.offset;
      if (extra > 0) next(extra, shape, strides);
    }
  }

  OffsetT location() { return offset; }
};
template <class OffsetT>
struct LoopedElemToLoc<1, OffsetT, true> {
  int dim;
  OffsetT offset{0};
  uint index{0};

  LoopedElemToLoc(int dim_) : dim(dim_) {}

  void next(const int* shape, const int64_t* strides) {
    index++;
    if (dim > 1)
      offset = elem_to_loc<OffsetT>(index, shape, strides, dim);
    else
      offset += OffsetT(strides[0]);
  }

  void next(int n, const int* shape, const int64_t* strides) {
    index += n;
    if (dim > 1)
      offset = elem_to_loc<OffsetT>(index, shape, strides, dim);
    else
      offset = index * OffsetT(strides[0]);
  }

  OffsetT location() { return offset; }
};
template <class OffsetT>
struct LoopedElemToLoc<1, OffsetT, false> {
  OffsetT offset{0};

  LoopedElemToLoc(int) {}

  void next(const int*, const int64_t* strides) { offset += OffsetT(strides[0]); }
  void next(int n, const int*, const int64_t* strides) { offset += n * OffsetT(strides[0]); }

  OffsetT location() { return offset; }
};

// ---- calculation utilities
// ceil(N / M) for positive integers
template <class T, class U>
inline T ceildiv(T N, U M) {
  return (N + M - 1) / M;
}

// log(1 + x), accurate for small x
namespace metal {
namespace _mk {
inline float log1p_f(float x) {
  float xp1 = 1.0f + x;
  if (xp1 == __builtin_huge_valf()) return xp1;
  if (xp1 == 1.0f) return x;
  return x * (metal::log(xp1) / (xp1 - 1.0f));
}
}  // namespace _mk
}  // namespace metal
inline float log1p(float x) { return metal::_mk::log1p_f(x); }
inline bfloat16_t log1p(bfloat16_t x) { return bfloat16_t(metal::_mk::log1p_f(float(x))); }
inline complex64_t log1p(complex64_t in) {
  float x = in.real, y = in.imag;
  float zabs = __builtin_sqrtf(x * x + y * y);
  float theta = __builtin_atan2f(y, x + 1.0f);
  if (zabs < 0.5f) {
    float r = x * (2 + x) + y * y;
    if (r == 0) return {x, theta};  // underflow
    return {0.5f * metal::_mk::log1p_f(r), theta};
  }
  float z0 = __builtin_sqrtf((x + 1) * (x + 1) + y * y);
  return {__builtin_logf(z0), theta};
}

// std::conditional stand-in used by MLX kernels
template <bool condition, class T, class U>
struct ConditionalType {
  using type = U;
};
template <class T, class U>
struct ConditionalType<true, T, U> {
  using type = T;
};

namespace mlx {
// MLX's logging stub for Metal < 3.2: accepts and ignores log calls.
struct os_log {
  constexpr os_log(const char*, const char*) {}
  template <class... Args>
  void log_debug(const char*, Args...) const {}
};
}  // namespace mlx

#endif  // MKPY_METAL_NO_MLX

// Building a precompiled header of this file with -DMKPY_METAL_PCH_INSTANTIATE
// also stores the common vector types in it: each vecN type instantiates all
// its swizzle types (tens of ms for a 4-vector), which a PCH otherwise does not
// save.  Without the macro nothing is instantiated here.
#ifdef MKPY_METAL_PCH_INSTANTIATE
static_assert(sizeof(uint2) + sizeof(uint3) + sizeof(int2) + sizeof(int3) + sizeof(float2) +
                      sizeof(float3) + sizeof(float4) + sizeof(bool2) + sizeof(bool3) +
                      sizeof(bool4) + sizeof(half2) + sizeof(half4) >
                  0,
              "");
#endif

using namespace metal;

#ifndef __CUDACC_RTC__
#pragma clang diagnostic pop
#endif

#endif  // MKPY_METAL_H
