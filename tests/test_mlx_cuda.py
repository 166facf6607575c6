"""Metal kernels in real MLX on its CUDA back-end: mkpy.cuda.metal_kernel and patch_mlx (issue #24).

mkpy.cuda's kernels hand MLX's mx.fast.cuda_kernel a `source` (the body of the __global__ function
MLX writes) and a `header` (mkpy's runtime and the translated kernel). Without a GPU these tests
check that path end to end up to NVRTC: the kernels of tests/test_kernel_corpus.py are called
through mkpy.cuda's kernel objects against a stand-in for mlx.core (FakeMLX: arrays with a dtype
and a shape, and a cuda_kernel that records what it is given); each recorded kernel is put in the
program MLX's CUDA back-end writes around it (mlx_cuda_program) and compiled with NVRTC the way
MLX compiles it, for sm_80 and sm_90a. With real MLX, its CUDA back-end and a GPU,
test_real_mlx_runs_corpus_kernels runs the same kernels through the patched
mlx.core.fast.metal_kernel and compares the results with mkpy's.

What MLX does (mlx/backend/cuda/custom_kernel.cpp and jit_module.cpp, MLX 0.32): the program is
`#include "mlx/backend/cuda/device/utils.cuh"` and `#include <cooperative_groups.h>`, then the
header, then in namespace mlx::core::cu (with `namespace cg = cooperative_groups;`) the function
`__global__ void custom_kernel_<name>(...)`: per input `const <T>* <name>` and, for inputs of
ndim > 0 whose `<name>_shape` / `_strides` / `_ndim` occur in the source (a substring search),
`const __grid_constant__ Shape <name>_shape` (cuda::std::array<int32_t, 10>), `Strides` (of
int64_t) and `int`; per output `<T>* <name>`; template arguments as constexpr/using lines; the
source; and the closing braces. T is MLX's dtype_to_cuda_type (float16 is __half, bfloat16
__nv_bfloat16). NVRTC runs with --device-as-default-execution-space and
--gpu-architecture=sm_<cc> (sm_90a on compute capability 9), with MLX's device headers, CCCL and
the CUDA headers on its include path. A launch is a block per threadgroup: block = min(threadgroup,
grid) and grid = ceil(grid / threadgroup) per dimension, all three dimensions.

The CUDA headers and CCCL come from PyPI's nvidia-cuda-runtime and nvidia-cuda-cccl (`make deps`
unpacks them beside NVRTC in mkpy/_nvrtc). MLX's own device headers are in MLX's source, not in its
wheels (they are compiled into libmlx): with MKPY_MLX_SOURCE set to a checkout of MLX, the real
utils.cuh is used; otherwise a stand-in declaring what the program uses of it (Shape, Strides and
the headers it includes)."""
import concurrent.futures
import ctypes
import os
import pathlib
import re
import sys
import types

import numpy as np
import pytest

import mkpy as mx
import mkpy.cuda
import test_kernel_corpus as corpus

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARCHS = ["sm_80", "sm_90a"]

# MLX's dtype_to_cuda_type
CUDA_TYPE = {"bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
             "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
             "float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double",
             "complex64": "mlx::core::cu::complex64_t"}

# what the program uses of MLX's utils.cuh, when MLX's source is not at hand
UTILS_STAND_IN = """#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/array>
#include <cuda/std/complex>
#include <cuda/std/limits>
#include <cuda/std/tuple>
#define MAX_NDIM 10
#define WARP_SIZE 32
namespace mlx::core::cu {
using Shape = cuda::std::array<int32_t, MAX_NDIM>;
using Strides = cuda::std::array<int64_t, MAX_NDIM>;
using complex64_t = cuda::std::complex<float>;
}
"""


# ------------------------------------------------------------------ NVRTC as MLX runs it

def _nvrtc():
    """(libnvrtc, include options) or a reason to skip."""
    lib = None
    env = os.environ.get("MKPY_NVRTC")
    cands = [os.path.join(env, "libnvrtc.so.13") if env and os.path.isdir(env) else env,
             str(ROOT / "mkpy/_nvrtc/nvidia/cu13/lib/libnvrtc.so.13"), "libnvrtc.so.13", "libnvrtc.so"]
    for c in cands:
        if not c:
            continue
        try:
            lib = ctypes.CDLL(c)
            break
        except OSError:
            pass
    if lib is None:
        return None, "NVRTC could not be loaded (make deps unpacks it into mkpy/_nvrtc)"
    inc = pathlib.Path(os.environ.get("MKPY_CUDA_INCLUDE", ROOT / "mkpy/_nvrtc/nvidia/cu13/include"))
    if not (inc / "cuda_fp16.h").exists() or not (inc / "cccl/cuda/std/array").exists():
        return None, f"the CUDA headers and CCCL are not in {inc} (make deps unpacks them)"
    opts = [f"--include-path={inc}", f"--include-path={inc / 'cccl'}"]
    src = os.environ.get("MKPY_MLX_SOURCE")
    if src:
        if not (pathlib.Path(src) / "mlx/backend/cuda/device/utils.cuh").exists():
            return None, f"MKPY_MLX_SOURCE={src} has no mlx/backend/cuda/device/utils.cuh"
        opts.append(f"--include-path={src}")
    return (lib, opts), None


NVRTC, NVRTC_MISSING = _nvrtc()


def nvrtc_compile(program, arch, kernel):
    """Compiles `program` as MLX's jit_module.cpp does; returns the lowered name of `kernel` and,
    for a compute_XY arch, the PTX."""
    lib, inc = NVRTC
    names, texts = [], []
    if not os.environ.get("MKPY_MLX_SOURCE"):
        names, texts = [b"mlx/backend/cuda/device/utils.cuh"], [UTILS_STAND_IN.encode()]
    prog = ctypes.c_void_p()
    hdrs = (ctypes.c_char_p * max(1, len(texts)))(*texts)
    hnames = (ctypes.c_char_p * max(1, len(names)))(*names)
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), program.encode(), b"custom_kernel.cu", len(texts), hdrs,
                                  hnames) == 0
    try:
        assert lib.nvrtcAddNameExpression(prog, kernel.encode()) == 0
        opts = ["--device-as-default-execution-space", f"--gpu-architecture={arch}"] + inc
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value + 1)
        lib.nvrtcGetProgramLog(prog, log)
        assert rc == 0, f"NVRTC failed for {arch}:\n{log.value.decode(errors='replace')[:6000]}"
        lowered = ctypes.c_char_p()
        assert lib.nvrtcGetLoweredName(prog, kernel.encode(), ctypes.byref(lowered)) == 0
        if not arch.startswith("compute_"):
            return lowered.value.decode(), None
        lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
        ptx = ctypes.create_string_buffer(n.value)
        assert lib.nvrtcGetPTX(prog, ptx) == 0
        return lowered.value.decode(), ptx.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def mlx_cuda_program(kernel, inputs):
    """The program MLX's CUDA back-end compiles for a FakeMLX cuda_kernel call (see the docstring)."""
    s = kernel.spec
    src = s["source"]
    text = '\n#include "mlx/backend/cuda/device/utils.cuh"\n\n#include <cooperative_groups.h>\n\n'
    text += s["header"] + "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n"
    text += f"__global__ void custom_kernel_{s['name']}(\n"
    for name, x in zip(s["input_names"], inputs):
        text += f"    const {CUDA_TYPE[x.dtype.name]}* {name},\n"
        if len(x.shape) > 0:
            for suffix, typ in (("_shape", "Shape"), ("_strides", "Strides"), ("_ndim", "int")):
                if name + suffix in src:
                    text += f"    const __grid_constant__ {typ} {name}{suffix},\n"
    text += ",\n".join(f"    {CUDA_TYPE[d.name]}* {n}" for n, d in zip(s["output_names"], kernel.call["output_dtypes"]))
    return text + ") {\n" + src + "\n}\n\n} // namespace mlx::core::cu\n"


# ------------------------------------------------------------------ a stand-in for mlx.core

class Dtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"mlx.core.{self.name}"


class FakeArray:
    """mlx.core.array's constructor for what mkpy.cuda makes (Python scalars, the grid) and .of() for the rest."""

    def __init__(self, v, dtype=None):
        if isinstance(v, (list, tuple)):
            self.dtype, self.shape = dtype, (len(v),)
        else:
            kind = "bool" if isinstance(v, bool) else "int32" if isinstance(v, int) else "float32"
            self.dtype, self.shape = dtype or Dtype(kind), ()

    @classmethod
    def of(cls, dtype, shape):
        a = cls(0.0)
        a.dtype, a.shape = dtype, tuple(shape)
        return a


class FakeCudaKernel:
    def __init__(self, fake, spec):
        self.fake, self.spec, self.call = fake, spec, None

    def __call__(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, init_value=None,
                 verbose=False, stream=None):
        self.call = dict(inputs=inputs, output_shapes=output_shapes, output_dtypes=output_dtypes, grid=grid,
                         threadgroup=threadgroup, init_value=init_value, verbose=verbose, stream=stream)
        self.fake.calls.append(self)
        return [FakeArray.of(d, s) for d, s in zip(output_dtypes, output_shapes)]


def fake_mlx():
    """A module standing in for mlx.core: what mkpy.cuda's kernels use of it."""
    m = types.ModuleType("mlx.core")
    for name in CUDA_TYPE:
        setattr(m, name if name != "bool" else "bool_", Dtype(name))
    m.calls, m.made = [], []

    def cuda_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True,
                    shared_memory=0):
        k = FakeCudaKernel(m, dict(name=name, input_names=input_names, output_names=output_names, source=source,
                                   header=header, ensure_row_contiguous=ensure_row_contiguous))
        m.made.append(k)
        return k

    m.array = FakeArray
    m.fast = types.SimpleNamespace(cuda_kernel=cuda_kernel)
    m.cuda = types.SimpleNamespace(is_available=lambda: True)
    return m


@pytest.fixture
def fake(monkeypatch):
    m = fake_mlx()
    pkg = types.ModuleType("mlx")
    pkg.core = m
    monkeypatch.setitem(sys.modules, "mlx", pkg)
    monkeypatch.setitem(sys.modules, "mlx.core", m)
    return m


def mlx_dtype(m, d):
    """The dtype of module m (FakeMLX or real MLX) named as mkpy's Dtype d (anything else as it is)."""
    if not isinstance(d, mx.Dtype):
        return d
    name = repr(d).rpartition(".")[2]
    return getattr(m, "bool_" if name == "bool" else name)


def to_fake(m, v):
    """A mkpy input as the FakeMLX array real MLX would get (Python scalars stay scalars)."""
    return FakeArray.of(mlx_dtype(m, v.dtype), v.shape) if isinstance(v, mx.array) else v


def to_mlx(m, v):
    """A mkpy input as a real MLX array (Python scalars stay scalars)."""
    if not isinstance(v, mx.array):
        return v
    if v.dtype == mx.bfloat16:
        return m.array(np.array(v.astype(mx.float32))).astype(m.bfloat16)
    return m.array(np.array(v))


def call_args(m, kw):
    """A recorded mkpy call's keyword arguments for module m's arrays and dtypes."""
    conv = to_fake if hasattr(m, "made") else to_mlx  # FakeMLX or real MLX
    return dict(inputs=[conv(m, v) for v in kw["inputs"]], output_shapes=kw["output_shapes"],
                output_dtypes=[mlx_dtype(m, d) for d in kw["output_dtypes"]], grid=kw["grid"],
                threadgroup=kw["threadgroup"], init_value=kw.get("init_value"),
                template=[(n, mlx_dtype(m, v)) for n, v in kw.get("template") or []] or None)


# ------------------------------------------------------------------ the corpus's calls

class Recorder:
    """Stands in for a corpus kernel: runs it (mkpy, as the corpus test expects) and records the call."""

    def __init__(self, kernel, calls):
        self.kernel, self.calls = kernel, calls

    def __call__(self, **kw):
        outs = self.kernel(**kw)
        self.calls.append((self.kernel, kw, outs))
        return outs


# corpus tests whose every output element is defined (compared on a GPU) ...
RUN_CASES = [
    ("test_tiled_matmul", dict(M=37, K=50, N=29)),
    ("test_rms_norm_rows", dict(rows=5, n=33, tg=96, dtype=mx.float16)),
    ("test_softmax_rows", dict(rows=2, n=257, tg=256, dtype=mx.bfloat16)),
    ("test_tree_reduction", dict(n=5000, tg=128, dtype=mx.int32)),
    ("test_bitonic_sort_rows", dict(rows=3, n=100, dtype=mx.float32)),
    ("test_prefix_scan", dict(n=5000, tg=256, dtype=mx.int32)),
    ("test_histogram_device_atomics", dict(n=1000, nb=16)),
    ("test_histogram_threadgroup_atomics", dict(n=5000, grid=1000, tg=96)),
    ("test_scatter_add_float_atomics", dict(n=1000, rows=7, D=3)),
    ("test_transpose_padded_tile", dict(R=33, C=70)),
    ("test_grid_sample_forward_and_backward_from_mlx_docs", dict(xshape=(2, 5, 7, 3), gshape=(2, 4, 6))),
    ("test_early_return_then_barriers", dict(n=100, tg=64)),
    ("test_barriers_in_loops_and_helpers_structs_and_scalars", dict(groups=3, tg=64)),
    ("test_conv1d_with_program_scope_constants", dict(n=21, k=2)),
    ("test_flash_attention_online_softmax", dict(Lq=13, Lk=33, D=32, causal=True, dtype=mx.float16)),
    ("test_gemm_on_simdgroup_matrices", dict(M=37, K=50, N=29, dtype=mx.float32)),
    ("test_sinkhorn_knopp_loop_template", dict(groups=5)),
    ("test_attention_with_thread0_statistics_bfloat16", dict(Lq=5, Lk=77)),
]
# ... and ones with elements a kernel leaves undefined (inactive lanes): compiled only
COMPILE_CASES = RUN_CASES + [("test_every_simd_and_quad_function", dict(tname=t)) for t in corpus.SIMD_TYPES] + [
    ("test_simd_functions_in_divergent_code", dict(n=100, tg=64))]


def record(monkeypatch, cases):
    """Runs corpus tests with every kernel they call recorded: [(kernel, call kwargs, outputs)]."""
    calls = []
    with monkeypatch.context() as mp:
        for name, value in list(vars(corpus).items()):
            if type(value).__name__ == "MetalKernel":
                mp.setattr(corpus, name, Recorder(value, calls))
            elif isinstance(value, dict) and any(type(v).__name__ == "MetalKernel" for v in value.values()):
                mp.setattr(corpus, name, {key: Recorder(v, calls) if type(v).__name__ == "MetalKernel" else v
                                          for key, v in value.items()})
        made = mx.fast.metal_kernel
        mp.setattr(mx.fast, "metal_kernel", lambda *a, **kw: Recorder(made(*a, **kw), calls))
        mp.setattr(corpus, "SIMD_KERNELS", {})
        for test, kw in cases:
            getattr(corpus, test)(**kw)
    return calls


def test_call_path_and_generated_program(fake, capsys):
    k = mkpy.cuda.metal_kernel(name="scale_rows", input_names=["x", "s"], output_names=["out"],
                               source="uint i = thread_position_in_grid.x;\nuint r = thread_position_in_grid.y;\n"
                                      "out[r * x_shape[1] + i] = T(x[r * x_shape[1] + i] * s);")
    assert repr(k) == "<metal_kernel scale_rows (MLX CUDA)>"
    x = FakeArray.of(fake.float16, (2, 3))
    outs = k(inputs=[x, 2.0], output_shapes=[(2, 3)], output_dtypes=[fake.float16], grid=(3, 2, 1),
             threadgroup=(256, 1, 1), template=[("T", fake.float16)], init_value=0.5)
    assert [o.shape for o in outs] == [(2, 3)]
    ck, = fake.calls
    s, c = ck.spec, ck.call
    # MLX's name: the kernel's and a hash of the program (MLX < 0.32.1 keys its modules by name alone)
    assert re.fullmatch("scale_rows_[0-9a-f]{16}", s["name"]) and s["input_names"] == ["in0", "in1", "mkpy_grid"]
    assert s["output_names"] == ["out0"] and s["ensure_row_contiguous"] is True
    assert c["grid"] == (3, 2, 1) and c["threadgroup"] == (256, 1, 1) and c["init_value"] == 0.5
    assert c["inputs"][0] is x   # a Python scalar becomes a 0-d float32 array, as MLX makes it
    assert c["inputs"][1].shape == () and c["inputs"][1].dtype.name == "float32"
    assert c["inputs"][2].dtype is fake.uint32 and c["inputs"][2].shape == (3,)
    # the body: Metal's attributes from CUDA's built-ins, then the translated kernel function
    assert "::mkpy::mlx_thread_attrs(mkpy_grid, t)" in s["source"] and "in0_shape.data()" in s["source"]
    assert "in1_shape" not in s["source"] and "MKPY_MLX_KERNEL<float16_t>(" in s["source"]
    assert "#define MKPY_MLX_KERNEL ::custom_kernel_scale_rows_" in s["header"]
    assert "// mkpy: blocks of at most 256 threads" in s["source"]
    # the header: mkpy's runtime (no #include of it: MLX's NVRTC has no path to it) and the kernel
    assert "#define MKPY_CUDA_HOSTED 1" in s["header"] and '#include "mkpy_' not in s["header"]
    assert '#line 1 "<kernel scale_rows source>"' in s["header"]
    program = mlx_cuda_program(ck, c["inputs"][:2] + [c["inputs"][2]])
    assert "const __grid_constant__ Shape in0_shape," in program
    # a second call with the same dtypes reuses the kernel; other dtypes make another
    k(inputs=[x, 3.0], output_shapes=[(2, 3)], output_dtypes=[fake.float16], grid=(5, 2, 1),
      threadgroup=(256, 1, 1), template=[("T", fake.float16)])
    assert len(fake.made) == 1 and len(fake.calls) == 2 and fake.calls[1].call["grid"] == (5, 2, 1)
    k(inputs=[x, 3.0], output_shapes=[(2, 3)], output_dtypes=[fake.float32], grid=(3, 2, 1),
      threadgroup=(256, 1, 1), template=[("T", fake.float32)], verbose=True, stream="s")
    assert len(fake.made) == 2 and fake.made[0].spec["name"] != fake.made[1].spec["name"]
    # verbose: the generated Metal source here, and MLX is asked to print its CUDA program
    assert "Generated source code for `scale_rows`" in capsys.readouterr().out
    assert fake.calls[-1].call["verbose"] is True and fake.calls[-1].call["stream"] == "s"
    other = mkpy.cuda.metal_kernel(name="scale_rows", input_names=["x", "s"], output_names=["out"],
                                   source="out[0] = T(x[0] * s + x_shape[1]);")
    other(inputs=[x, 3.0], output_shapes=[(2, 3)], output_dtypes=[fake.float32], grid=(3, 2, 1),
          threadgroup=(256, 1, 1), template=[("T", fake.float32)])
    assert len({k.spec["name"] for k in fake.made}) == 3   # same name and dtypes, another source
    if NVRTC_MISSING:
        pytest.skip(NVRTC_MISSING)
    for arch in ARCHS:
        assert nvrtc_compile(program, arch, f"mlx::core::cu::custom_kernel_{s['name']}")[0]
    # the header's declaration of MLX's function gives it launch bounds: the declaration matches
    # (a declaration that did not would make MLX's name expression ambiguous, an NVRTC error)
    name, ptx = nvrtc_compile(program, "compute_80", f"mlx::core::cu::custom_kernel_{s['name']}")
    entry = ptx[ptx.index(f".entry {name}("):]
    assert entry[:entry.index("{")].count(".maxntid 256, 1, 1") == 1


def test_errors_raise_at_the_call(fake):
    bad = mkpy.cuda.metal_kernel(name="uses_double", input_names=["x"], output_names=["y"],
                                 source="double d = x[0]; y[0] = float(d);")
    x = FakeArray.of(fake.float32, (4,))
    call = dict(inputs=[x], output_shapes=[(4,)], output_dtypes=[fake.float32], grid=(4, 1, 1),
                threadgroup=(4, 1, 1))
    with pytest.raises(RuntimeError, match="Metal does not support"):
        bad(**call)
    ok = mkpy.cuda.metal_kernel(name="copy", input_names=["x"], output_names=["y"],
                                source="y[thread_position_in_grid.x] = x[thread_position_in_grid.x];")
    with pytest.raises(ValueError, match="Expected `inputs` to have size 1 but got size 2"):
        ok(**{**call, "inputs": [x, x]})
    with pytest.raises(ValueError, match="maximum allowed threads per threadgroup"):
        ok(**{**call, "threadgroup": (64, 32, 1)})
    with pytest.raises(ValueError, match="65535"):
        ok(**{**call, "grid": (1, 70000, 1), "threadgroup": (1, 1, 1)})
    with pytest.raises(ValueError, match="float64 is not supported on the GPU"):
        ok(**{**call, "output_dtypes": [fake.float64]})
    with pytest.raises(ValueError, match="Invalid template argument"):
        ok(**{**call, "template": [("T", 1.5)]})
    printing = mkpy.cuda.metal_kernel(name="prints", input_names=["x"], output_names=["y"],
                                      source='os_log_default.log("%f", x[0]); y[0] = x[0];')
    with pytest.raises(RuntimeError, match="os_log or printf"):
        printing(**call)
    assert fake.made == []


def test_patch_mlx(fake):
    old = fake.fast.metal_kernel = object()
    assert mkpy.cuda.patch_mlx() is old
    assert fake.fast.metal_kernel is mkpy.cuda.metal_kernel


def test_stand_in_mlx_is_refused(monkeypatch):
    pkg = types.ModuleType("mlx")
    pkg.core = mx
    monkeypatch.setitem(sys.modules, "mlx", pkg)
    monkeypatch.setitem(sys.modules, "mlx.core", mx)
    k = mkpy.cuda.metal_kernel(name="copy", input_names=["x"], output_names=["y"], source="y[0] = x[0];")
    with pytest.raises(RuntimeError, match="stand-in"):
        k(inputs=[mx.zeros(1)], output_shapes=[(1,)], output_dtypes=[mx.float32], grid=(1, 1, 1),
          threadgroup=(1, 1, 1))


@pytest.mark.skipif(NVRTC_MISSING is not None, reason=str(NVRTC_MISSING))
def test_corpus_kernels_compile_as_mlx_compiles_them(monkeypatch, fake):
    calls = record(monkeypatch, COMPILE_CASES)
    programs = {}
    for kernel, kw, _ in calls:
        fake.calls.clear()
        mkpy.cuda._MetalKernel(kernel)(**call_args(fake, kw))
        ck, = fake.calls
        programs[mlx_cuda_program(ck, ck.call["inputs"])] = f"mlx::core::cu::custom_kernel_{ck.spec['name']}"
    assert len(programs) >= len(COMPILE_CASES)
    # NVRTC runs without the GIL (ctypes releases it): two at a time
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(nvrtc_compile, p, arch, name) for p, name in programs.items() for arch in ARCHS]
        for job in jobs:
            job.result()


def real_mlx():
    """Real MLX with its CUDA back-end and a GPU, or None."""
    try:
        import mlx.core as m
    except Exception:
        return None
    if m is mx or not hasattr(m.fast, "cuda_kernel") or not m.cuda.is_available():
        return None
    return m


def test_real_mlx_runs_corpus_kernels(monkeypatch):
    m = real_mlx()   # imported here, not at collection: other modules' tests own sys.modules["mlx"]
    if m is None:
        pytest.skip("needs real MLX with its CUDA back-end (mlx[cuda13]) and an NVIDIA GPU")
    calls = record(monkeypatch, RUN_CASES)
    old = mkpy.cuda.patch_mlx()
    try:
        for kernel, kw, outs in calls:
            k = m.fast.metal_kernel(**kernel._spec())   # the patched one: mkpy.cuda.metal_kernel
            assert isinstance(k, mkpy.cuda._MetalKernel)
            got = k(**call_args(m, kw))
            m.eval(got)
            name = kernel._spec()["name"]
            for want, have in zip(outs, got):
                tol = 1e-4 if want.dtype == mx.float32 else 2e-2
                want = np.array(want.astype(mx.float32) if want.dtype == mx.bfloat16 else want)
                have = np.array(have.astype(m.float32) if have.dtype == m.bfloat16 else have)
                assert have.shape == want.shape, name
                if np.issubdtype(want.dtype, np.floating):
                    np.testing.assert_allclose(have, want, rtol=tol, atol=tol, err_msg=name)
                else:
                    np.testing.assert_array_equal(have, want, err_msg=name)
    finally:
        m.fast.metal_kernel = old
