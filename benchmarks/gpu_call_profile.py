"""Where a cached GPU kernel call's time goes (a development tool, not a row of `make bench`):
bench_gpu.py's `call` row taken apart, on a machine with an NVIDIA GPU and CuPy.

  mkpy call only      k(...) without the eval: the front end, the graph node
  mkpy call + eval    the row's mkpy side (launch, wait, the output's buffer)
  CuPy call only      RawKernel launch, no synchronisation
  CuPy call + sync    the row's reference
  driver: launch + X  the same 1-thread CuPy kernel launched through ctypes with libcuda's
                      cuLaunchKernel, then waited for with X: cuStreamSynchronize,
                      cuCtxSynchronize, or a cuStreamQuery spin (mkpy's wait). ctypes' overhead
                      is the same in the three, so their differences are the waits'.

Best of several samples, microseconds per call.
Run: (cd benchmarks && PYTHONPATH=$PWD/.. python3 gpu_call_profile.py)
"""
import ctypes
import time

import numpy as np

import mkpy as mx


def best(fn, n=2000, rounds=7):
    fn()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n)
    return min(out) * 1e6


def main():
    import cupy as cp
    k = mx.fast.metal_kernel(name="bench_call_gpu", input_names=["x"], output_names=["o"],
                             source="o[0] = x[0] + 1.0f;")
    x = mx.array([1.0])
    mx.eval(x)

    def mk_call():
        return k(inputs=[x], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)], output_dtypes=[mx.float32])

    def mk_eval():
        o, = mk_call()
        mx.eval(o)

    f = cp.RawKernel('extern "C" __global__ void one(const float *x, float *o) { o[0] = x[0] + 1.0f; }', "one")
    gx = cp.asarray(np.array([1.0], np.float32))
    go = cp.empty_like(gx)

    def cp_call():
        f((1,), (1,), (gx, go))

    def cp_sync():
        f((1,), (1,), (gx, go))
        cp.cuda.Device().synchronize()

    cp_sync()
    rows = [("mkpy call only", lambda: mk_call()), ("mkpy call + eval", mk_eval),
            ("CuPy call only", cp_call), ("CuPy call + sync", cp_sync)]
    cu = ctypes.CDLL("libcuda.so.1")
    fn = ctypes.c_void_p(f.kernel.ptr)
    px, po = ctypes.c_void_p(gx.data.ptr), ctypes.c_void_p(go.data.ptr)
    params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.pointer(px), ctypes.c_void_p),
                                   ctypes.cast(ctypes.pointer(po), ctypes.c_void_p))
    launch, query = cu.cuLaunchKernel, cu.cuStreamQuery
    null = ctypes.c_void_p(0)

    def drv(wait):
        def run():
            r = launch(fn, 1, 1, 1, 1, 1, 1, 0, null, params, null)
            assert r == 0, r
            wait()
        return run

    def spin():
        while query(null) == 600:  # CUDA_ERROR_NOT_READY
            pass

    rows += [("driver: launch + cuStreamSynchronize", drv(lambda: cu.cuStreamSynchronize(null))),
             ("driver: launch + cuCtxSynchronize", drv(cu.cuCtxSynchronize)),
             ("driver: launch + cuStreamQuery spin", drv(spin)),
             ("driver: cuStreamQuery on an idle stream", lambda: query(null))]
    for name, fn_ in rows:
        print("%-42s %7.2f us" % (name, best(fn_)))
    mx.eval(x)


if __name__ == "__main__":
    main()
