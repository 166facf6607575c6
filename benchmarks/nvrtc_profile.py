"""Where a new kernel's compile goes (issue #24's "new kernel, first result" row): NVRTC times of
mkpy's programs for the GPU bench's kernels (the one-thread kernel of the `first` row, `exp`, the
16x16 tiled SGEMM) against the same kernels in plain CUDA (what CuPy compiles), each as mkpy writes
it (the runtime header's pieces its names use: backend/cuda/parts.c) and with the whole header,
and NVRTC's per-process precompiled header. A profiling tool, not a bench section: it needs no GPU
(NVRTC only).

  PYTHONPATH=. python3 benchmarks/nvrtc_profile.py [--reps=N] [--wall]

NVRTC is loaded as mkpy's back-end finds it (MKPY_NVRTC, mkpy/_nvrtc, the system's); the programs
are the ones mkpy writes (MKPY_CUDA_COMPILE_CHECK leaves them in a scratch disk cache), compiled
with mkpy's options (csrc/backend/cuda/nvrtc.c). Each case is compiled --reps times with a new
constant (no cache can serve it), interleaved with the others; min and median are printed, in the
process's CPU time (steadier than wall time on a loaded machine; --wall for wall time).
"""
import ctypes
import glob
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
INCLUDE = os.path.join(ROOT, "mkpy", "include")
SAFE = ["-fmad=true", "-prec-div=true", "-prec-sqrt=true", "-ftz=false"]
MKPY = ["-arch=sm_90", "-std=c++17", "-default-device", "-I" + INCLUDE, "-lineinfo", "-diag-suppress=161",
        "-device-int128"] + SAFE
CUPY = ["-arch=sm_90", "-std=c++17"]
PLAIN = 'extern "C" __global__ void one(const float *x, float *o) { o[0] = x[0] + 1.0f; }\n'
PLAIN_EXP = ('extern "C" __global__ void vexp(const float *x, float *y, unsigned long long n) {\n'
             '    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n'
             '    if (i < n) y[i] = expf(x[i]) * 1.0f;\n}\n')
EXP_SRC = "uint i = thread_position_in_grid.x;\nout[i] = metal::exp(inp[i]) * 1.0f;\n"
# the pieces' switches that mkpy writes before #include "mkpy_cuda.h"
PIECE_LINE = re.compile(r"^#define MKPY_(METAL_NO_\w+|CUDA_NO_\w+|METAL_SWIZZLES|METAL_MATH_NAMES|METAL_WANT_\w+) .*\n", re.M)


def load_nvrtc():
    names = [os.environ.get("MKPY_NVRTC", "")]
    names += glob.glob(os.path.join(ROOT, "mkpy", "_nvrtc", "nvidia", "*", "lib", "libnvrtc.so*"))
    names += ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    for n in names:
        if n and os.path.isdir(n):
            n = (glob.glob(os.path.join(n, "libnvrtc.so*")) or [""])[0]
        if not n:
            continue
        try:
            return ctypes.CDLL(n)
        except OSError:
            continue
    return None


def mkpy_programs():
    """mkpy's CUDA programs for the bench's kernels, as MKPY_CUDA_COMPILE_CHECK leaves them."""
    cache = tempfile.mkdtemp(prefix="mkpy_nvrtc_profile_")
    os.environ.update(MKPY_CACHE_DIR=cache, MKPY_CUDA_COMPILE_CHECK="sm_90", MKPY_GPU="cpu")
    sys.path.insert(0, ROOT)
    sys.path.insert(0, HERE)
    import mkpy as mx
    from bench_kernels import SGEMM_SRC

    def program(name, source, names, out, inputs, grid, tg, shape):
        k = mx.fast.metal_kernel(name=name, input_names=names, output_names=[out], source=source)
        mx.eval(k(inputs=inputs, grid=grid, threadgroup=tg, output_shapes=[shape], output_dtypes=[mx.float32])[0])
        found = [p for p in glob.glob(os.path.join(cache, "*.cu")) if f"<kernel {name} source>" in open(p).read()]
        return open(found[0]).read()

    try:
        x = mx.array([1.0])
        v = mx.arange(1024, dtype=mx.float32) / 1024
        a = mx.ones((64, 64))
        return {
            "first": program("bench_first_gpu", "o[0] = x[0] + 1.0f;", ["x"], "o", [x], (1, 1, 1), (1, 1, 1), (1,)),
            "exp": program("bench_exp_gpu", EXP_SRC, ["inp"], "out", [v], (1024, 1, 1), (256, 1, 1), (1024,)),
            # (1.0f - 1.0f: a constant that each repetition changes)
            "sgemm": program("bench_sgemm_gpu", SGEMM_SRC.replace("0.0f", "1.0f - 1.0f"), ["A", "B", "n"], "C",
                             [a, a, 64], (64, 64, 1), (16, 16, 1), (64, 64)),
        }
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def compile_once(nv, src, opts, clock):
    prog = ctypes.c_void_p()
    if nv.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0, None, None) != 0:
        raise RuntimeError("nvrtcCreateProgram failed")
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    t0 = clock()
    rc = nv.nvrtcCompileProgram(prog, len(opts), arr)
    dt = clock() - t0
    nv.nvrtcDestroyProgram(ctypes.byref(prog))
    if rc != 0:
        raise RuntimeError("NVRTC failed (%d) with %s" % (rc, " ".join(opts)))
    return dt


def main():
    reps = next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--reps=")), 8)
    clock = time.perf_counter if "--wall" in sys.argv else time.process_time
    nv = load_nvrtc()
    if nv is None:
        print("NVRTC not found (make deps unpacks it into mkpy/_nvrtc)")
        return
    progs = mkpy_programs()
    cases = [("plain CUDA one-thread kernel, CuPy's options", PLAIN, CUPY),
             ("plain CUDA exp kernel, CuPy's options", PLAIN_EXP, CUPY)]
    for k, p in progs.items():
        cases.append(("%s: mkpy's program (its pieces)" % k, p, MKPY))
        cases.append(("%s: with the whole runtime header" % k, PIECE_LINE.sub("", p), MKPY))
    cases.append(("first: mkpy's program, -pch, later ones", progs["first"], MKPY + ["-pch", "-diag-suppress=20283"]))
    times = {name: [] for name, _, _ in cases}
    first_pch = None
    for r in range(reps):
        for name, src, opts in cases:
            dt = compile_once(nv, src.replace("1.0f", "%d.0f" % (r + 2), 1), opts, clock)
            if "-pch" in opts and first_pch is None:
                first_pch = dt  # creates the process's PCH for this header and macros
                continue
            times[name].append(dt)
    print("%-52s %9s %9s  (%s)" % ("NVRTC compile for sm_90", "min ms", "median ms",
                                   "wall" if clock is time.perf_counter else "CPU time"))
    for name, ts in times.items():
        ts = sorted(ts)
        print("%-52s %9.1f %9.1f" % (name, ts[0] * 1e3, ts[len(ts) // 2] * 1e3))
    print("%-52s %9.1f" % ("first: mkpy's program, -pch, first (creates it)", first_pch * 1e3))


if __name__ == "__main__":
    main()
