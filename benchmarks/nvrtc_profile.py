"""Where a new kernel's compile goes (issue #24's "new kernel, first result" row): NVRTC times of
mkpy's program for the bench's one-thread kernel against the same kernel in plain CUDA (what CuPy
compiles), with the options NVRTC offers that could cut it. A profiling tool, not a bench section:
it needs no GPU (NVRTC only), and its numbers are only worth quoting on an idle machine.

  PYTHONPATH=. python3 benchmarks/nvrtc_profile.py [--reps=N]

NVRTC is loaded as mkpy's back-end finds it (MKPY_NVRTC, mkpy/_nvrtc, the system's); the program
is the one mkpy writes (MKPY_CUDA_COMPILE_CHECK leaves it in a scratch disk cache), compiled with
mkpy's options (csrc/backend/cuda/nvrtc.c). Each case is compiled --reps times with a new constant
(no cache can serve it), interleaved with the others; min and median are printed.
"""
import ctypes
import glob
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
INCLUDE = os.path.join(ROOT, "mkpy", "include")
SAFE = ["-fmad=true", "-prec-div=true", "-prec-sqrt=true", "-ftz=false"]
PLAIN = 'extern "C" __global__ void one(const float *x, float *o) { o[0] = x[0] + 1.0f; }\n'


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


def mkpy_program():
    """mkpy's CUDA program for the bench's call kernel, as MKPY_CUDA_COMPILE_CHECK leaves it."""
    cache = tempfile.mkdtemp(prefix="mkpy_nvrtc_profile_")
    os.environ.update(MKPY_CACHE_DIR=cache, MKPY_CUDA_COMPILE_CHECK="sm_90", MKPY_GPU="cpu")
    sys.path.insert(0, ROOT)
    import mkpy as mx
    k = mx.fast.metal_kernel(name="bench_call_gpu", input_names=["x"], output_names=["o"],
                             source="o[0] = x[0] + 1.0f;")
    mx.eval(k(inputs=[mx.array([1.0])], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
              output_dtypes=[mx.float32])[0])
    try:
        return open(glob.glob(os.path.join(cache, "*.cu"))[0]).read()
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def compile_once(nv, src, opts):
    prog = ctypes.c_void_p()
    if nv.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0, None, None) != 0:
        raise RuntimeError("nvrtcCreateProgram failed")
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    t0 = time.perf_counter()
    rc = nv.nvrtcCompileProgram(prog, len(opts), arr)
    dt = time.perf_counter() - t0
    nv.nvrtcDestroyProgram(ctypes.byref(prog))
    if rc != 0:
        raise RuntimeError("NVRTC failed (%d) with %s" % (rc, " ".join(opts)))
    return dt


def main():
    reps = next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--reps=")), 8)
    nv = load_nvrtc()
    if nv is None:
        print("NVRTC not found (make deps unpacks it into mkpy/_nvrtc)")
        return
    prog = mkpy_program()
    mkpy = ["-arch=sm_90", "-std=c++17", "-default-device", "-I" + INCLUDE, "-lineinfo", "-diag-suppress=161"] + SAFE
    cases = [
        ("plain CUDA kernel, CuPy's options", PLAIN, ["-arch=sm_90", "-std=c++17"]),
        ("plain kernel + mkpy_metal.h", '#include "mkpy_metal.h"\n' + PLAIN, mkpy),
        ("plain kernel + mkpy_cuda.h", '#include "mkpy_cuda.h"\n' + PLAIN, mkpy),
        ("mkpy's program, mkpy's options", prog, mkpy),
        ("mkpy's program without -lineinfo", prog, [o for o in mkpy if o != "-lineinfo"]),
        ("mkpy's program, -minimal", prog, mkpy + ["-minimal"]),
        ("mkpy's program, -pch (after the first)", prog, mkpy + ["-pch", "-diag-suppress=20283"]),
    ]
    times = {name: [] for name, _, _ in cases}
    first_pch = None
    for r in range(reps):
        for name, src, opts in cases:
            dt = compile_once(nv, src.replace("1.0f", "%d.0f" % (r + 2)), opts)
            if "-pch" in opts and first_pch is None:
                first_pch = dt  # creates the process's PCH
                continue
            times[name].append(dt)
    print("%-44s %9s %9s" % ("NVRTC compile (sm_90)", "min ms", "median ms"))
    for name, ts in times.items():
        ts = sorted(ts)
        print("%-44s %9.1f %9.1f" % (name, ts[0] * 1e3, ts[len(ts) // 2] * 1e3))
    print("%-44s %9.1f" % ("mkpy's program, -pch, first (creates it)", first_pch * 1e3))
    parts = ["mkpy_cuda.h", "mkpy_metal.h", "mkpy_launch.h", "mkpy_cuda_launch.h", "mkpy_cuda_std.h"]
    print("runtime header (%s): %d bytes" % (", ".join(parts),
                                             sum(os.path.getsize(os.path.join(INCLUDE, p)) for p in parts)))


if __name__ == "__main__":
    main()
