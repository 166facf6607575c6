"""Tests for the kernel runtime header mkpy/include/mkpy_metal.h.

Compiles and runs the standalone C++ test program tests/cpp/test_runtime_header.cpp
and checks that the header compiles with and without -ffast-math. The compiler is
$MKPY_CXX, else the newest clang++ (>= 15) on PATH.
"""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = os.path.join(ROOT, "mkpy", "include")
HEADER = os.path.join(INCLUDE, "mkpy_metal.h")
TEST_CPP = os.path.join(ROOT, "tests", "cpp", "test_runtime_header.cpp")
BASE_FLAGS = ["-std=c++17", "-O2", "-Wall", "-fno-exceptions", "-fno-rtti", "-I", INCLUDE]


def _clang_major(cxx):
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"clang version (\d+)", out)
    return int(m.group(1)) if m else None


def _find_cxx():
    env = os.environ.get("MKPY_CXX")
    if env:
        return env, None
    for name in [f"clang++-{v}" for v in range(19, 14, -1)] + ["clang++"]:
        path = shutil.which(name)
        if path:
            major = _clang_major(path)
            if major is not None and major >= 15:
                return path, None
    return None, "no clang++ >= 15 found (set MKPY_CXX to a C++17 compiler)"


CXX, _SKIP_REASON = _find_cxx()
needs_cxx = pytest.mark.skipif(CXX is None, reason=_SKIP_REASON or "")


def _compile(args, timeout=300):
    return subprocess.run([CXX] + args, capture_output=True, text=True, timeout=timeout)


def _header_diagnostics(stderr):
    """Warnings or errors reported inside the header."""
    return [l for l in stderr.splitlines() if "mkpy_metal.h" in l and ("warning" in l or "error" in l)]


def _cpu_has_f16c():
    try:
        with open("/proc/cpuinfo") as f:
            return any(l.startswith("flags") and " f16c" in l for l in f)
    except OSError:
        return False


@needs_cxx
@pytest.mark.parametrize("variant", ["portable", "f16c"])
def test_runtime_header_program(tmp_path, variant):
    extra = []
    if variant == "f16c":
        if not _cpu_has_f16c():
            pytest.skip("CPU has no F16C")
        extra = ["-mf16c"]
    exe = str(tmp_path / "test_runtime_header")
    r = _compile(BASE_FLAGS + ["-Wextra"] + extra + [TEST_CPP, "-o", exe])
    assert r.returncode == 0, r.stderr
    assert not _header_diagnostics(r.stderr), r.stderr
    run = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 failed" in run.stdout
    assert f"F16C path: {1 if variant == 'f16c' else 0}" in run.stdout


SMALL_KERNEL = r"""
#include "mkpy_metal.h"
template <typename T>
void kernel_body(const T* inp, const int* inp_shape, const int64_t* inp_strides,
                 const int& inp_ndim, T* out, uint3 thread_position_in_grid) {
  uint elem = thread_position_in_grid.x;
  T tmp = inp[elem_to_loc(elem, inp_shape, inp_strides, inp_ndim)];
  out[elem] = metal::exp(tmp) + metal::max(tmp, T(0)) + Limits<T>::finite_max * T(0);
}
template void kernel_body<float>(const float*, const int*, const int64_t*, const int&, float*, uint3);
template void kernel_body<half>(const half*, const int*, const int64_t*, const int&, half*, uint3);
template void kernel_body<bfloat16_t>(const bfloat16_t*, const int*, const int64_t*, const int&,
                                      bfloat16_t*, uint3);
float4 vector_body(float4 v, half4 h, bool4 m) {
  v.xy = v.yx * 2.0f + float2(h.zw);
  float3 n = normalize(cross(v.xyz, float3(1, 0, 0)));
  v = select(v, float4(n, 1.0f), m) + fast::exp(v) + precise::sqrt(abs(v));
  return isnan(v.x) ? float4(0) : clamp(mix(v, v.wzyx, 0.5f), 0.0f, 1.0f);
}
"""


@needs_cxx
@pytest.mark.parametrize("fast_math", [False, True], ids=["plain", "fast-math"])
def test_header_compiles(tmp_path, fast_math):
    src = tmp_path / "kernel.cpp"
    src.write_text(SMALL_KERNEL)
    flags = BASE_FLAGS + ["-Wextra", "-c", str(src), "-o", str(tmp_path / "kernel.o")]
    if fast_math:
        flags = ["-ffast-math", "-D__FAST_MATH__"] + flags
    r = _compile(flags)
    assert r.returncode == 0, r.stderr
    assert not _header_diagnostics(r.stderr), r.stderr


# Things MSL rejects must not compile here either.
INVALID = {
    "as_type_size": "uint2 f() { return as_type<uint2>(1.0f); }",
    "repeated_swizzle_store": "void f(float4 v) { v.xx = float2(1, 2); }",
    "mixed_vector_types": "float4 f(float4 a, int4 b) { return a + b; }",
    "vector_length_mismatch": "float4 f(float4 a, float3 b) { return a + b; }",
    "implicit_vector_conversion": "float4 f(half4 h) { float4 v = h; return v; }",
    "float_to_bfloat_implicit": "bfloat f(float x) { bfloat b = x; return b; }",
    "cross_of_float4": "float4 f(float4 a) { return cross(a, a); }",
    # Metal's vectors have 2, 3, 4, 8 or 16 components
    "vec_of_5": "float f(vec<float, 5> v) { return v[0]; }",
    "vec_of_32": "vec<half, 32> f() { return vec<half, 32>(0); }",
    "packed_vec_of_6": "float f(packed_vec<float, 6> v) { return v[0]; }",
    "long_vector_swizzle": "float4 f(vec<float, 8> v) { return v.xyzw; }",
    "long_vector_length_mismatch": "vec<float, 8> f(vec<float, 8> a, vec<float, 16> b) { return a + b; }",
}


@needs_cxx
@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_code_is_rejected(tmp_path, name):
    src = tmp_path / f"{name}.cpp"
    src.write_text('#include "mkpy_metal.h"\n' + INVALID[name] + "\n")
    r = _compile(BASE_FLAGS + ["-fsyntax-only", str(src)])
    assert r.returncode != 0, f"{name} compiled but should not"


@needs_cxx
def test_precompiled_header(tmp_path):
    """The header works as a PCH (with the vector types pre-instantiated)."""
    pch = str(tmp_path / "mkpy_metal.h.pch")
    flags = ["-std=c++17", "-O2", "-fno-exceptions", "-fno-rtti"]
    r = _compile(flags + ["-DMKPY_METAL_PCH_INSTANTIATE", "-x", "c++-header", HEADER, "-o", pch])
    assert r.returncode == 0, r.stderr
    src = tmp_path / "kernel.cpp"
    src.write_text(SMALL_KERNEL)
    r = _compile(flags + ["-Wall", "-I", INCLUDE, "-include-pch", pch, "-c", str(src),
                          "-o", str(tmp_path / "kernel.o")])
    assert r.returncode == 0, r.stderr
