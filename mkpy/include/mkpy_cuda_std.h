// mkpy_cuda_std.h: what mkpy_metal.h takes from the C and C++ standard
// libraries, for NVRTC, which compiles without any system header (no
// <stdint.h>, <float.h>, <type_traits>). Included by mkpy_metal.h in place of
// those headers when __CUDACC_RTC__ is defined; never by a CPU build.
//
// It also maps the __builtin_* math and bit functions mkpy_metal.h calls (a
// clang-ism; NVRTC knows __builtin_bit_cast and __builtin_is_constant_evaluated
// only) to CUDA's device functions of the same meaning.
#ifndef MKPY_CUDA_STD_H
#define MKPY_CUDA_STD_H

#ifndef __CUDACC_RTC__
#error "mkpy_cuda_std.h is for NVRTC only"
#endif

// ---- <stdint.h>, <stddef.h>, <limits.h>, <float.h>
#ifdef MKPY_CUDA_HOSTED
// Hosted by MLX's mx.fast.cuda_kernel (mkpy.cuda.metal_kernel): MLX's header
// has already included CCCL's NVRTC versions of these (cuda/std/...; CCCL is
// on MLX's NVRTC include path), which declare the same names globally, so
// they are taken from there rather than declared twice.
#include <cuda/std/cstdint>
#include <cuda/std/cstddef>
#include <cuda/std/climits>
#include <cuda/std/cfloat>
#define __FLT_DENORM_MIN__ FLT_TRUE_MIN
#else
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;
typedef long ptrdiff_t;
typedef decltype(sizeof(0)) size_t;
#define INT8_MAX 127
#define INT16_MAX 32767
#define INT32_MAX 2147483647
#define INT64_MAX 9223372036854775807LL
#define INT8_MIN (-128)
#define INT16_MIN (-32768)
#define INT32_MIN (-2147483647 - 1)
#define INT64_MIN (-9223372036854775807LL - 1)
#define UINT8_MAX 255
#define UINT16_MAX 65535
#define UINT32_MAX 4294967295U
#define UINT64_MAX 18446744073709551615ULL
#define SIZE_MAX UINT64_MAX
#ifndef NULL
#define NULL 0
#endif
#define offsetof(t, m) __builtin_offsetof(t, m)

// ---- <limits.h>
#define CHAR_BIT 8
#define SCHAR_MAX 127
#define SCHAR_MIN (-128)
#define UCHAR_MAX 255
#define CHAR_MAX 127
#define CHAR_MIN (-128)
#define SHRT_MAX 32767
#define SHRT_MIN (-32768)
#define USHRT_MAX 65535
#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
#define UINT_MAX 4294967295U
#define LONG_MAX 9223372036854775807L
#define LONG_MIN (-9223372036854775807L - 1)
#define ULONG_MAX 18446744073709551615UL
#define LLONG_MAX 9223372036854775807LL
#define LLONG_MIN (-9223372036854775807LL - 1)
#define ULLONG_MAX 18446744073709551615ULL

// ---- <float.h> (IEEE binary32 and binary64)
#define FLT_RADIX 2
#define FLT_MANT_DIG 24
#define FLT_DIG 6
#define FLT_MIN_EXP (-125)
#define FLT_MAX_EXP 128
#define FLT_MIN_10_EXP (-37)
#define FLT_MAX_10_EXP 38
#define FLT_MAX 3.40282347e+38F
#define FLT_MIN 1.17549435e-38F
#define FLT_EPSILON 1.19209290e-07F
#define FLT_TRUE_MIN 1.40129846e-45F
#define __FLT_DENORM_MIN__ 1.40129846e-45F
#define DBL_MANT_DIG 53
#define DBL_DIG 15
#define DBL_MAX 1.7976931348623157e+308
#define DBL_MIN 2.2250738585072014e-308
#define DBL_EPSILON 2.2204460492503131e-16
#endif // MKPY_CUDA_HOSTED

// ---- <type_traits>: the part mkpy_metal.h uses
namespace std {
template <class T, T v>
struct integral_constant {
    static constexpr T value = v;
    typedef T value_type;
    typedef integral_constant type;
    constexpr operator value_type() const noexcept { return value; }
    constexpr value_type operator()() const noexcept { return value; }
};
template <bool B> using bool_constant = integral_constant<bool, B>;
typedef bool_constant<true> true_type;
typedef bool_constant<false> false_type;

template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <bool B, class T = void> using enable_if_t = typename enable_if<B, T>::type;
template <bool B, class T, class F> struct conditional { typedef T type; };
template <class T, class F> struct conditional<false, T, F> { typedef F type; };
template <bool B, class T, class F> using conditional_t = typename conditional<B, T, F>::type;
template <class...> using void_t = void;

template <class T, class U> struct is_same : false_type {};
template <class T> struct is_same<T, T> : true_type {};
template <class T, class U> constexpr bool is_same_v = is_same<T, U>::value;

template <class T> struct remove_const { typedef T type; };
template <class T> struct remove_const<const T> { typedef T type; };
template <class T> struct remove_volatile { typedef T type; };
template <class T> struct remove_volatile<volatile T> { typedef T type; };
template <class T> struct remove_cv { typedef typename remove_volatile<typename remove_const<T>::type>::type type; };
template <class T> using remove_const_t = typename remove_const<T>::type;
template <class T> using remove_volatile_t = typename remove_volatile<T>::type;
template <class T> using remove_cv_t = typename remove_cv<T>::type;
template <class T> struct remove_reference { typedef T type; };
template <class T> struct remove_reference<T &> { typedef T type; };
template <class T> struct remove_reference<T &&> { typedef T type; };
template <class T> using remove_reference_t = typename remove_reference<T>::type;
template <class T> struct remove_pointer { typedef T type; };
template <class T> struct remove_pointer<T *> { typedef T type; };
template <class T> struct remove_pointer<T *const> { typedef T type; };
template <class T> struct remove_pointer<T *volatile> { typedef T type; };
template <class T> struct remove_pointer<T *const volatile> { typedef T type; };
template <class T> using remove_pointer_t = typename remove_pointer<T>::type;
template <class T> struct add_const { typedef const T type; };
template <class T> using add_const_t = typename add_const<T>::type;
template <class T> struct add_pointer { typedef remove_reference_t<T> *type; };
template <class T> using add_pointer_t = typename add_pointer<T>::type;
template <class T> struct remove_extent { typedef T type; };
template <class T> struct remove_extent<T[]> { typedef T type; };
template <class T, size_t N> struct remove_extent<T[N]> { typedef T type; };

template <class T> struct is_const : false_type {};
template <class T> struct is_const<const T> : true_type {};
template <class T> constexpr bool is_const_v = is_const<T>::value;
template <class T> struct is_reference : false_type {};
template <class T> struct is_reference<T &> : true_type {};
template <class T> struct is_reference<T &&> : true_type {};
template <class T> constexpr bool is_reference_v = is_reference<T>::value;
template <class T> struct is_array : false_type {};
template <class T> struct is_array<T[]> : true_type {};
template <class T, size_t N> struct is_array<T[N]> : true_type {};
template <class T> constexpr bool is_array_v = is_array<T>::value;
namespace _mk_detail {
template <class T> struct is_ptr : false_type {};
template <class T> struct is_ptr<T *> : true_type {};
template <class T> struct is_int : false_type {};
#define MKPY_STD_INT(T) template <> struct is_int<T> : true_type {};
MKPY_STD_INT(bool) MKPY_STD_INT(char) MKPY_STD_INT(signed char) MKPY_STD_INT(unsigned char)
MKPY_STD_INT(short) MKPY_STD_INT(unsigned short) MKPY_STD_INT(int) MKPY_STD_INT(unsigned int)
MKPY_STD_INT(long) MKPY_STD_INT(unsigned long) MKPY_STD_INT(long long) MKPY_STD_INT(unsigned long long)
MKPY_STD_INT(wchar_t) MKPY_STD_INT(char16_t) MKPY_STD_INT(char32_t)
#undef MKPY_STD_INT
template <class T> struct is_fp : false_type {};
template <> struct is_fp<float> : true_type {};
template <> struct is_fp<double> : true_type {};
template <> struct is_fp<long double> : true_type {};
template <class T> struct is_void : false_type {};
template <> struct is_void<void> : true_type {};
template <class T> struct is_nullptr : false_type {};
template <> struct is_nullptr<decltype(nullptr)> : true_type {};
template <class T> struct is_memptr : false_type {};
template <class T, class C> struct is_memptr<T C::*> : true_type {};
template <class T> struct type_identity { typedef T type; };
template <class T, bool = is_int<T>::value> struct sgn { static constexpr bool value = false, uns = false; };
template <class T> struct sgn<T, true> { static constexpr bool value = T(-1) < T(0), uns = !(T(-1) < T(0)); };
} // namespace _mk_detail
template <class T> struct is_pointer : _mk_detail::is_ptr<remove_cv_t<T>> {};
template <class T> constexpr bool is_pointer_v = is_pointer<T>::value;
template <class T> struct is_integral : _mk_detail::is_int<remove_cv_t<T>> {};
template <class T> constexpr bool is_integral_v = is_integral<T>::value;
template <class T> struct is_floating_point : _mk_detail::is_fp<remove_cv_t<T>> {};
template <class T> constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <class T> struct is_arithmetic : bool_constant<is_integral<T>::value || is_floating_point<T>::value> {};
template <class T> constexpr bool is_arithmetic_v = is_arithmetic<T>::value;
template <class T> struct is_void : _mk_detail::is_void<remove_cv_t<T>> {};
template <class T> constexpr bool is_void_v = is_void<T>::value;
template <class T> struct is_enum : bool_constant<__is_enum(T)> {};
template <class T> constexpr bool is_enum_v = is_enum<T>::value;
template <class T> struct is_class : bool_constant<__is_class(T)> {};
template <class T> constexpr bool is_class_v = is_class<T>::value;
template <class B, class D> struct is_base_of : bool_constant<__is_base_of(B, D)> {};
template <class B, class D> constexpr bool is_base_of_v = is_base_of<B, D>::value;
template <class T> struct is_trivially_copyable : bool_constant<__is_trivially_copyable(T)> {};
template <class T>
struct is_scalar
    : bool_constant<is_arithmetic<T>::value || is_enum<T>::value || is_pointer<T>::value ||
                    _mk_detail::is_memptr<remove_cv_t<T>>::value || _mk_detail::is_nullptr<remove_cv_t<T>>::value> {};
template <class T> struct is_signed : bool_constant<is_floating_point<T>::value || _mk_detail::sgn<remove_cv_t<T>>::value> {};
template <class T> constexpr bool is_signed_v = is_signed<T>::value;
template <class T> struct is_unsigned : bool_constant<_mk_detail::sgn<remove_cv_t<T>>::uns> {};
template <class T> constexpr bool is_unsigned_v = is_unsigned<T>::value;

template <class T> typename _mk_detail::type_identity<T &&>::type declval() noexcept;

namespace _mk_detail {
template <class F, class T, class = void> struct conv : false_type {};
template <class F, class T>
struct conv<F, T, void_t<decltype(static_cast<void (*)(T)>(nullptr)(std::declval<F>()))>> : true_type {};
} // namespace _mk_detail
template <class F, class T>
struct is_convertible : bool_constant<(is_void<F>::value && is_void<T>::value) || _mk_detail::conv<F, T>::value> {};
template <class F, class T> constexpr bool is_convertible_v = is_convertible<F, T>::value;

template <class T> struct decay {
    typedef remove_reference_t<T> U;
    typedef conditional_t<is_array<U>::value, typename remove_extent<U>::type *, remove_cv_t<U>> type;
};
template <class T> using decay_t = typename decay<T>::type;

template <class... T> struct common_type {};
template <class T> struct common_type<T> : common_type<T, T> {};
template <class A, class B> struct common_type<A, B> {
    typedef decay_t<decltype(true ? std::declval<A>() : std::declval<B>())> type;
};
template <class A, class B, class C, class... R>
struct common_type<A, B, C, R...> : common_type<typename common_type<A, B>::type, C, R...> {};
template <class... T> using common_type_t = typename common_type<T...>::type;

namespace _mk_detail {
template <size_t N> struct sized;
template <> struct sized<1> { typedef signed char s; typedef unsigned char u; };
template <> struct sized<2> { typedef short s; typedef unsigned short u; };
template <> struct sized<4> { typedef int s; typedef unsigned int u; };
template <> struct sized<8> { typedef long long s; typedef unsigned long long u; };
template <class T> struct mk_sign { typedef typename sized<sizeof(T)>::s s; typedef typename sized<sizeof(T)>::u u; };
template <> struct mk_sign<long> { typedef long s; typedef unsigned long u; };
template <> struct mk_sign<unsigned long> { typedef long s; typedef unsigned long u; };
} // namespace _mk_detail
template <class T> struct make_signed { typedef typename _mk_detail::mk_sign<remove_cv_t<T>>::s type; };
template <class T> struct make_unsigned { typedef typename _mk_detail::mk_sign<remove_cv_t<T>>::u type; };
template <class T> using make_signed_t = typename make_signed<T>::type;
template <class T> using make_unsigned_t = typename make_unsigned<T>::type;
} // namespace std

// ---- the clang builtins of mkpy_metal.h, as CUDA's device functions
#define __builtin_huge_valf() __builtin_bit_cast(float, 0x7f800000u)
#define __builtin_nanf(s) __builtin_bit_cast(float, 0x7fc00000u)
#define __builtin_nansf(s) __builtin_bit_cast(float, 0x7fa00000u)
#define __builtin_memcpy memcpy
#define __builtin_clz __clz
#define __builtin_clzll __clzll
#define __builtin_ctz(x) (__ffs(x) - 1)
#define __builtin_ctzll(x) (__ffsll(x) - 1)
#define __builtin_popcount __popc
#define __builtin_popcountll __popcll
#define __builtin_bitreverse8(x) ((unsigned char)(__brev((unsigned)(x)) >> 24))
#define __builtin_bitreverse16(x) ((unsigned short)(__brev((unsigned)(x)) >> 16))
#define __builtin_bitreverse32 __brev
#define __builtin_bitreverse64 __brevll
#define __builtin_add_overflow(a, b, r) ::mkpy_cuda_std_detail::add_overflow(a, b, r)
#define __builtin_sub_overflow(a, b, r) ::mkpy_cuda_std_detail::sub_overflow(a, b, r)
namespace mkpy_cuda_std_detail {
template <class T> inline bool add_overflow(T a, T b, T *r) {
    typedef std::make_unsigned_t<T> U;
    *r = T(U(a) + U(b));
    return std::is_signed<T>::value ? ((a > 0 && b > 0 && *r < 0) || (a < 0 && b < 0 && *r >= 0)) : U(*r) < U(a);
}
template <class T> inline bool sub_overflow(T a, T b, T *r) {
    typedef std::make_unsigned_t<T> U;
    *r = T(U(a) - U(b));
    return std::is_signed<T>::value ? ((a >= 0 && b < 0 && *r < 0) || (a < 0 && b > 0 && *r >= 0)) : U(a) < U(b);
}
} // namespace mkpy_cuda_std_detail
#define __builtin_acosf acosf
#define __builtin_acoshf acoshf
#define __builtin_asinf asinf
#define __builtin_asinhf asinhf
#define __builtin_atanf atanf
#define __builtin_atanhf atanhf
#define __builtin_atan2f atan2f
#define __builtin_ceilf ceilf
#define __builtin_copysignf copysignf
#define __builtin_cosf cosf
#define __builtin_coshf coshf
#define __builtin_erff erff
#define __builtin_expf expf
#define __builtin_exp2f exp2f
#define __builtin_fabsf fabsf
#define __builtin_fdimf fdimf
#define __builtin_floorf floorf
#define __builtin_fmaf fmaf
#define __builtin_fmaxf fmaxf
#define __builtin_fminf fminf
#define __builtin_fmodf fmodf
#define __builtin_frexpf frexpf
#define __builtin_ilogbf ilogbf
#define __builtin_ldexpf ldexpf
#define __builtin_logf logf
#define __builtin_log2f log2f
#define __builtin_log10f log10f
#define __builtin_modff modff
#define __builtin_nextafterf nextafterf
#define __builtin_powf powf
#define __builtin_rintf rintf
#define __builtin_roundf roundf
#define __builtin_sinf sinf
#define __builtin_sinhf sinhf
#define __builtin_sqrtf sqrtf
#define __builtin_tanf tanf
#define __builtin_tanhf tanhf
#define __builtin_truncf truncf
// double versions, through wrappers declared before the renaming below
namespace mkpy_cuda_std_detail {
inline double libm_cos(double x) { return ::cos(x); }
inline double libm_sin(double x) { return ::sin(x); }
inline double libm_tan(double x) { return ::tan(x); }
inline double libm_pow(double x, double y) { return ::pow(x, y); }
inline double libm_sqrt(double x) { return ::sqrt(x); }
} // namespace mkpy_cuda_std_detail
#define __builtin_cos ::mkpy_cuda_std_detail::libm_cos
#define __builtin_sin ::mkpy_cuda_std_detail::libm_sin
#define __builtin_tan ::mkpy_cuda_std_detail::libm_tan
#define __builtin_pow ::mkpy_cuda_std_detail::libm_pow
#define __builtin_sqrt ::mkpy_cuda_std_detail::libm_sqrt

// ---- Metal's names that CUDA also declares in the global namespace.
// NVRTC declares CUDA's vector types (float4, uint3, ...) and float overloads
// of the math functions (exp, min, abs, ...) at global scope before any of
// our text, and nothing can hide them. With `using namespace metal;` (MLX's
// header has it) `uint3` or `exp(x)` would then be ambiguous. So these names
// are renamed for all the text that follows (the runtime header, the user's
// header and source alike): `exp` is `metal_exp` everywhere, metal::exp
// included, consistently; only diagnostics show the new name.
#define float2 metal_float2
#define float3 metal_float3
#define float4 metal_float4
#define int2 metal_int2
#define int3 metal_int3
#define int4 metal_int4
#define uint2 metal_uint2
#define uint3 metal_uint3
#define uint4 metal_uint4
#define char2 metal_char2
#define char3 metal_char3
#define char4 metal_char4
#define uchar2 metal_uchar2
#define uchar3 metal_uchar3
#define uchar4 metal_uchar4
#define short2 metal_short2
#define short3 metal_short3
#define short4 metal_short4
#define ushort2 metal_ushort2
#define ushort3 metal_ushort3
#define ushort4 metal_ushort4
#define long2 metal_long2
#define long3 metal_long3
#define long4 metal_long4
#define ulong2 metal_ulong2
#define ulong3 metal_ulong3
#define ulong4 metal_ulong4
#define abs metal_abs
#define acos metal_acos
#define acosh metal_acosh
#define all metal_all
#define any metal_any
#define asin metal_asin
#define asinh metal_asinh
#define atan metal_atan
#define atan2 metal_atan2
#define atanh metal_atanh
#define ceil metal_ceil
#define copysign metal_copysign
#define cos metal_cos
#define cosh metal_cosh
#define cospi metal_cospi
#define erf metal_erf
#define exp metal_exp
#define exp10 metal_exp10
#define exp2 metal_exp2
#define fabs metal_fabs
#define fdim metal_fdim
#define floor metal_floor
#define fma metal_fma
#define fmax metal_fmax
#define fmin metal_fmin
#define fmod metal_fmod
#define frexp metal_frexp
#define ilogb metal_ilogb
#define isfinite metal_isfinite
#define isinf metal_isinf
#define isnan metal_isnan
#define ldexp metal_ldexp
#define log metal_log
#define log10 metal_log10
#define log1p metal_log1p
#define log2 metal_log2
#define max metal_max
#define min metal_min
#define modf metal_modf
#define nan metal_nan
#define nextafter metal_nextafter
#define pow metal_pow
#define remainder metal_remainder
#define rint metal_rint
#define round metal_round
#define rsqrt metal_rsqrt
#define signbit metal_signbit
#define sin metal_sin
#define sincos metal_sincos
#define sinh metal_sinh
#define sinpi metal_sinpi
#define sqrt metal_sqrt
#define tan metal_tan
#define tanh metal_tanh
#define trunc metal_trunc
#ifdef MKPY_CUDA_HOSTED
// MLX's header includes cuda_fp16.h, whose global typedefs `half` and `half2`
// (for __half, __half2) would make Metal's half ambiguous in the same way.
#define half metal_half
#define half2 metal_half2
#endif

#endif
