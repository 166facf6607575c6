"""The CUDA target compiled without a GPU (issue #24): Metal kernels translated to CUDA C++ and
compiled by NVRTC (MKPY_CUDA_COMPILE_CHECK). conftest.py turns the mode on for the kernel corpus,
the guides' examples and the simdgroup_matrix tests; these check the mode itself."""
import glob
import os
import re

import pytest

import mkpy as mx
from conftest import nvrtc_missing


@pytest.fixture(autouse=True)
def nvrtc(monkeypatch):
    why = nvrtc_missing()
    if why:
        pytest.skip(why)
    monkeypatch.setenv("MKPY_CUDA_COMPILE_CHECK", "sm_80,sm_90")


def run(kernel, x, **kw):
    return kernel(inputs=[x], grid=(x.size, 1, 1), threadgroup=(min(x.size, 256), 1, 1), output_shapes=[x.shape],
                  output_dtypes=[x.dtype], **kw)[0]


def cuda_sources(name):
    """The CUDA programs of kernel `name` in the disk cache (<hex>.cu beside its .cubin)."""
    out = []
    for p in glob.glob(os.path.join(os.environ["MKPY_CACHE_DIR"], "*.cu")):
        text = open(p).read()
        if f"<kernel {name} source>" in text:
            assert os.path.exists(p[:-3] + ".cubin") and os.path.exists(p[:-3] + ".key")
            out.append(text)
    return out


def test_error_at_the_users_line():
    # clang (the CPU) knows this builtin, NVRTC does not: only the CUDA compile fails
    k = mx.fast.metal_kernel(name="cuda_bad_line", input_names=["inp"], output_names=["out"],
                             source="uint i = thread_position_in_grid.x;\nfloat y = inp[i];\n"
                                    "out[i] = y + float(__builtin_readcyclecounter() & 0);\n")
    with pytest.raises(RuntimeError) as e:
        mx.eval(run(k, mx.zeros((8,))))
    msg = str(e.value)
    assert "Failed to compile kernel `cuda_bad_line`" in msg and "for CUDA sm_80" in msg
    assert "<kernel cuda_bad_line source>:3: error:" in msg and "__builtin_readcyclecounter" in msg
    assert "test_cuda_compile.py" in msg  # the call site


def test_program_shape_and_threadgroup_memory():
    src = """
        uint i = thread_position_in_grid.x;
        threadgroup float buf[64];
        buf[thread_index_in_threadgroup] = inp[i];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[i] = simd_sum(buf[thread_index_in_threadgroup]) + buf[63 - thread_index_in_threadgroup];
    """
    k = mx.fast.metal_kernel(name="cuda_shape", input_names=["inp"], output_names=["out"], source=src)
    x = mx.arange(64, dtype=mx.float32)
    mx.eval(run(k, x))
    progs = cuda_sources("cuda_shape")
    assert len(progs) == 2  # one per architecture (the program is the same; the key differs)
    p = progs[0]
    assert '#include "mkpy_cuda.h"' in p
    assert "__shared__ float buf[64];" in p and "threadgroup_alloc" not in p
    assert 'extern "C" __global__ void __launch_bounds__(64) mkpy_cuda_entry(const mkpy_cuda_launch L, ' \
           "void *a0, void *a1)" in p
    # the prologue writes only the attributes the kernel reads: thread_index_in_threadgroup and
    # thread_position_in_grid (bits 12 and 13, mkpy_launch.h's MKPY_ATTR_*)
    assert "if (!mkpy::cuda_thread_attrs<0x3000u>(L, t)) return;" in p


def test_template_and_header_and_atomics():
    header = "template <typename T> T twice(T v) { return v + v; }\nconstant float kScale = 0.5f;\n" \
             "constant float kTable[4] = {1, 2, 3, 4};\n"
    src = """
        uint i = thread_position_in_grid.x;
        T v = twice(inp[i]) * T(kScale) + T(kTable[i % 4]);
        atomic_fetch_add_explicit(&out[0], float(v), memory_order_relaxed);
        atomic_fetch_max_explicit((device atomic<int>*)&out[1], int(i), memory_order_relaxed);
    """
    k = mx.fast.metal_kernel(name="cuda_tmpl", input_names=["inp"], output_names=["out"], source=src, header=header,
                             atomic_outputs=True)
    for dt in (mx.float32, mx.float16, mx.bfloat16):
        x = mx.ones((32,), dtype=dt)
        o = k(inputs=[x], template=[("T", dt)], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(4,)],
              output_dtypes=[mx.float32], init_value=0)[0]
        mx.eval(o)
    assert len(cuda_sources("cuda_tmpl")) == 6


def test_bad_architecture_list(monkeypatch):
    monkeypatch.setenv("MKPY_CUDA_COMPILE_CHECK", "sm_eighty")
    k = mx.fast.metal_kernel(name="cuda_bad_arch", input_names=["inp"], output_names=["out"],
                             source="out[0] = inp[0];")
    with pytest.raises(ValueError, match="sm_80,sm_90"):
        mx.eval(run(k, mx.zeros((1,))))


def test_compiled_once_per_architecture():
    k = mx.fast.metal_kernel(name="cuda_once", input_names=["inp"], output_names=["out"],
                             source="uint i = thread_position_in_grid.x;\nout[i] = inp[i] * 3;\n")
    x = mx.arange(16, dtype=mx.float32)
    for _ in range(3):
        assert run(k, x).tolist() == (x * 3).tolist()
    assert len(cuda_sources("cuda_once")) == 2


def test_barriers_are_numbered_for_the_divergence_check():
    # each threadgroup_barrier carries its site (mkpy_cuda.h checks that a block's threads meet at
    # one site); a qualified call keeps its qualifier
    src = """
        uint l = thread_position_in_threadgroup.x;
        threadgroup float t[64];
        t[l] = inp[l];
        for (uint i = 0; i < 2; i++) threadgroup_barrier(mem_flags::mem_threadgroup);
        metal::threadgroup_barrier(mem_flags::mem_threadgroup);
        out[l] = t[63 - l];
    """
    k = mx.fast.metal_kernel(name="cuda_sites", input_names=["inp"], output_names=["out"], source=src)
    x = mx.arange(64, dtype=mx.float32)
    assert run(k, x).tolist() == [63.0 - i for i in range(64)]
    p = cuda_sources("cuda_sites")[0]
    assert "for (uint i = 0; i < 2; i++) ::metal::threadgroup_barrier_at(0u)(mem_flags::mem_threadgroup);" in p
    assert " metal::threadgroup_barrier_at(1u)(mem_flags::mem_threadgroup);" in p
    assert "mkpy::barrier_init();" in p


def test_cuda_only_names_are_hidden_from_the_users_text():
    # Metal has no threadIdx or __shfl_xor_sync: in the user's header and source they are renamed to
    # names nothing declares (so NVRTC refuses them as a Mac's compiler does), and restored after
    k = mx.fast.metal_kernel(name="cuda_names", input_names=["inp"], output_names=["out"],
                             header="inline float twice(float v) { return 2 * v; }\n",
                             source="uint i = thread_position_in_grid.x;\nout[i] = twice(inp[i]);\n")
    x = mx.arange(8, dtype=mx.float32)
    assert run(k, x).tolist() == [2.0 * i for i in range(8)]
    p = cuda_sources("cuda_names")[0]
    user = p.index("<kernel cuda_names header>")
    end = p.index("<mkpy entry>")
    for name in ("threadIdx", "__shfl_xor_sync", "__syncthreads", "atomicAdd", "__activemask"):
        d = p.index(f"#define {name} mkpy_not_metal_{name}\n")
        u = p.index(f"#undef {name}\n")
        assert d < user < u < end, name


PIECES = ("MKPY_METAL_NO_MATH", "MKPY_METAL_NO_MLX", "MKPY_CUDA_NO_SIMD", "MKPY_CUDA_NO_BARRIERS",
          "MKPY_CUDA_NO_ATOMICS", "MKPY_CUDA_NO_MATRIX")


@pytest.mark.parametrize("name,src,kept,swizzles,math", [
    ("plain", "out[i] = inp[i] * 2.0f;", (), 0, ()),
    ("math", "out[i] = metal::exp(inp[i]) + metal::precise::sqrt(inp[i]);", ("MKPY_METAL_NO_MATH",), 0,
     ("exp", "sqrt")),
    ("swizzles", "float4 v = float4(inp[i]); v.xy = v.yx; out[i] = dot(v.bgr, float3(1.0f));",
     ("MKPY_METAL_NO_MATH",), 1 | 16, ("dot",)),
    ("uses", "out[i] = clamp(inp[i], 1.0f, 2.0f) + float(mad24(int(i), 3, 4));", ("MKPY_METAL_NO_MATH",), 0,
     ("clamp", "mad24")),  # they call min, max and mul24: the header's block brings those
    ("simd", "out[i] = simd_sum(inp[i]) + simd_max(inp[i]);", ("MKPY_CUDA_NO_SIMD", "MKPY_METAL_NO_MATH"), 0,
     ("max", "min")),  # what simd_min and simd_max call
    ("barrier", "threadgroup float t[64]; t[i % 64] = inp[i];\n"
                "threadgroup_barrier(mem_flags::mem_threadgroup); out[i] = t[63 - i % 64];",
     ("MKPY_CUDA_NO_BARRIERS",), 0, ()),
    ("atomic", "atomic_fetch_add_explicit((device atomic_float *)&out[0], inp[i], memory_order_relaxed);",
     ("MKPY_CUDA_NO_ATOMICS",), 0, ()),
    ("matrix", "simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8, 8>(inp[0]);\n"
               "simdgroup_store(m, out, 8);",
     ("MKPY_CUDA_NO_MATRIX", "MKPY_CUDA_NO_SIMD", "MKPY_METAL_NO_MATH"), 0, ("max", "min")),
    ("mlx", "out[i] = float(ceildiv(int(i) + 1, 2)) + inp[i];", ("MKPY_METAL_NO_MLX", "MKPY_METAL_NO_MATH"), 0,
     None),  # MLX's utilities use many math functions: the whole section
])
def test_a_program_leaves_out_the_pieces_of_the_runtime_header_it_names_nothing_of(name, src, kept, swizzles, math):
    # NVRTC's parse of the whole runtime header was most of a new kernel's compile: a program
    # includes only the pieces whose names its kernel uses (backend/cuda/parts.c), the swizzle
    # sets and the math functions it names; each kernel here compiles with what it was given
    # (compile-check mode has no second try with the whole header)
    k = mx.fast.metal_kernel(name="cuda_pieces_" + name, input_names=["inp"], output_names=["out"],
                             source="uint i = thread_position_in_grid.x;\n" + src + "\n")
    x = mx.arange(64, dtype=mx.float32)
    mx.eval(run(k, x))
    p = cuda_sources("cuda_pieces_" + name)[0]
    head = p[:p.index('#include "mkpy_cuda.h"')]
    for piece in PIECES:
        assert (f"#define {piece} 1\n" in head) == (piece not in kept), (piece, head)
    assert f"#define MKPY_METAL_SWIZZLES {swizzles}\n" in head
    wanted = tuple(sorted(re.findall(r"#define MKPY_METAL_WANT_(\w+) 1\n", head)))
    assert ("#define MKPY_METAL_MATH_NAMES 1\n" in head) == (math is not None and "MKPY_METAL_NO_MATH" in kept)
    assert wanted == (tuple(sorted(math)) if math and "MKPY_METAL_NO_MATH" in kept else ()), wanted


def test_a_name_the_tables_cannot_see_fails_the_compile_check():
    # a piece's name made by the kernel's own token pasting is not in its text: the program
    # leaves the piece out and NVRTC refuses it. On a GPU the build compiles it again with the
    # whole header (tests/test_gpu.py); compile-check mode does not, so that the corpus finds
    # names missing from parts.c's tables
    k = mx.fast.metal_kernel(name="cuda_pasted", input_names=["inp"], output_names=["out"],
                             header="#define CAT(a, b) a##b\n",
                             source="uint i = thread_position_in_grid.x;\nout[i] = metal::CAT(ex, p)(inp[i]);\n")
    with pytest.raises(RuntimeError) as e:
        mx.eval(run(k, mx.zeros((8,))))
    assert "Failed to compile kernel `cuda_pasted`" in str(e.value) and "exp" in str(e.value)


def test_the_math_sections_names_and_their_uses_are_all_listed():
    # a program names the math functions it wants one by one (MKPY_METAL_WANT_<name>): parts.c's
    # list must hold every function of mkpy_metal.h's math section, and the section's own block of
    # uses must bring the functions that others call (a missing one fails the compile; on a GPU
    # the build then compiles with the whole header). Read from the sources, which are the lists.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = open(os.path.join(root, "mkpy", "include", "mkpy_metal.h")).read()
    sec = re.sub(r"//[^\n]*", "", h[h.index("#ifndef MKPY_METAL_NO_MATH"):h.index("#endif  // MKPY_METAL_NO_MATH")])
    c = open(os.path.join(root, "csrc", "backend", "cuda", "parts.c")).read()
    table = set(re.search(r'\[P_MATH\] = \{"MKPY_METAL_NO_MATH", 0,\s*((?:"[^"]*"\s*)+)', c).group(1)
                .replace('"', " ").split())
    uses = {}
    for m in re.finditer(r"#if MK_WANT\((\w+)\)\n(.*?)\n#endif", sec, re.S):  # the hand-written ones
        uses.setdefault(m.group(1), set()).update(re.findall(r"[A-Za-z_]\w*", m.group(2)))
    for m in re.finditer(r"^MK_(?:UN|PRED|BIN|TER|VEC1|VEC2|VEC3)\((\w+)(.*?)\)[ \t]*$", sec, re.M | re.S):
        uses.setdefault(m.group(1), set()).update(re.findall(r"[A-Za-z_]\w*", m.group(2)))
    assert set(uses) == table, (set(uses) - table, table - set(uses))
    block = {}
    for m in re.finditer(r"#if ((?:MK_WANT\(\w+\)(?: \|\| )?)+)\n#undef MKPY_METAL_WANT_(\w+)\n", sec):
        block[m.group(2)] = set(re.findall(r"MK_WANT\((\w+)\)", m.group(1)))
    for name, ids in uses.items():
        for callee in (ids & table) - {name}:
            assert name in block.get(callee, set()), f"{name} calls {callee}: add it to mkpy_metal.h's block"


@pytest.mark.parametrize("dtype", [mx.int16, mx.int32, mx.uint32, mx.int64, mx.uint64])
def test_wide_integer_helpers_compile(dtype):
    """mulhi, madhi and madsat go through __int128 in the Metal library: NVRTC needs -device-int128."""
    k = mx.fast.metal_kernel(name="cuda_mulhi", input_names=["inp"], output_names=["out"],
                             source="uint i = thread_position_in_grid.x;\n"
                                    "out[i] = mulhi(inp[i], inp[i]) + madhi(inp[i], inp[i], inp[i]) + "
                                    "madsat(inp[i], inp[i], inp[i]);\n")
    mx.eval(run(k, mx.arange(1, 9, dtype=dtype) * 3001))
    assert cuda_sources("cuda_mulhi")


def test_barrier_in_both_sides_leaves_the_sides_unordered():
    """A threadgroup barrier in a side of a divergent `if` with an `else`: the SIMD pass must not make
    one side wait for the other (the first side's lanes wait in the barrier: a hang on the GPU
    where the barrier check should report)."""
    k = mx.fast.metal_kernel(name="cuda_side_barrier", input_names=["inp"], output_names=["out"],
                             source="threadgroup float tile[32];\nuint t = thread_position_in_threadgroup.x;\n"
                                    "tile[t] = inp[t];\nif (t < 16) { threadgroup_barrier(mem_flags::mem_threadgroup); }"
                                    " else { threadgroup_barrier(mem_flags::mem_threadgroup); }\nout[t] = tile[31 - t];\n")
    with pytest.raises(RuntimeError, match="different barriers"):
        mx.eval(run(k, mx.arange(32, dtype=mx.float32)))
    texts = cuda_sources("cuda_side_barrier")  # one per architecture
    assert texts and all("simt_if<1, 0, true>" in t for t in texts)


@pytest.mark.parametrize("pch", ["1", "0"])
def test_debug_says_whether_nvrtc_took_its_precompiled_header(pch, tmp_path):
    # NVRTC's automatic PCH (-pch): the first program of a piece set creates it, a later one takes
    # it; MKPY_NVRTC_PCH=0 turns it off (a child process: the debug level is read once)
    import subprocess
    import sys
    code = ("import mkpy as mx\n"
            "x = mx.array([1.0])\n"
            "for c in (2, 3):\n"
            "    k = mx.fast.metal_kernel(name='pch_probe', input_names=['x'], output_names=['o'],\n"
            "                             source='o[0] = x[0] + %d.0f;' % c)\n"
            "    mx.eval(k(inputs=[x], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],\n"
            "              output_dtypes=[mx.float32])[0])\n")
    env = dict(os.environ, MKPY_DEBUG="1", MKPY_NVRTC_PCH=pch, MKPY_CUDA_COMPILE_CHECK="sm_90",
               MKPY_CACHE_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    said = re.findall(r"kernel `pch_probe`: NVRTC (created a precompiled header|took the precompiled header|"
                      r"no precompiled header[^\n]*)", p.stderr)
    if pch == "0":
        assert said == []
    else:
        assert said == ["created a precompiled header", "took the precompiled header"], p.stderr
