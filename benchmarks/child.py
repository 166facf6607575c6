"""Measurements that need a fresh process. Prints one JSON line.

  child.py kernel-first-eval NAME   time around the first eval of a small kernel
                                    (MKPY_CACHE_DIR is set by the parent)
  child.py kernel-first-eval-coop NAME  the same for a kernel with a barrier and simd_sum
  child.py sweep NAME N             N template values of that cooperative kernel, compiled
                                    on every core (a thread pool), to the last first result
  child.py pocl-first-run [coop]    PoCL: build a small program + first launch
                                    (POCL_CACHE_DIR is set by the parent); coop: a work-group
                                    reduction with a barrier and local memory
  child.py chain-mkpy|chain-numpy|chain-mlx [V]  peak resident memory of a 100-op
                                    chain; V varies the warm-up, which shifts the heap
                                    layout; MKPY_BENCH_CHAIN_N sets the elements (4M);
                                    mlx is MLX's CPU build (MKPY_BENCH_MLX_VENV)
  child.py timeit mkpy|numpy|mlx    seconds per call of a statement, the best of a few
                                    long loops: stdin holds {"setup", "stmt", "rounds"};
                                    the setup sees np, rng (seeded) and mx (mkpy or MLX)
"""
import json
import os
import resource
import sys
import time

N_CHAIN = int(os.environ.get("MKPY_BENCH_CHAIN_N", 4_000_000))
SMALL_KERNEL = """
    uint i = thread_position_in_grid.x;
    out[i] = metal::exp(inp[i]) * 0.5f + 1.0f;
"""
SMALL_CL = """
__kernel void small(__global const float* restrict in, __global float* restrict out) {
    uint i = get_global_id(0);
    out[i] = exp(in[i]) * 0.5f + 1.0f;
}
"""

# one barrier and a simd_sum: the lockstep engine's kind of kernel (SCALE: a template value)
COOP_KERNEL = """
    uint i = thread_position_in_grid.x;
    threadgroup float part[2];
    float v = simd_sum(inp[i]) * SCALE;
    if (thread_index_in_simdgroup == 0) part[simdgroup_index_in_threadgroup] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = part[0] + part[1];
"""
COOP_CL = """
__kernel void small(__global const float* restrict in, __global float* restrict out) {
    __local float part[64];
    uint l = get_local_id(0);
    part[l] = in[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = 32; s > 0; s >>= 1) {
        if (l < s) part[l] += part[l + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    out[get_global_id(0)] = part[0];
}
"""


def _shared_server(pid, comm):
    """Whether process pid is a shared compile-server daemon or one of its servers (started with
    MKPY_SRV_SOCKET in its environment, csrc/backend/cpu/srvd.c), under MKPY_SERVER_DIR when
    that is set."""
    want = b"\0MKPY_SRV_SOCKET=" + (os.environ.get("MKPY_SERVER_DIR", "").encode() + b"/"
                                    if os.environ.get("MKPY_SERVER_DIR") else b"")
    try:
        with open("/proc/%s/environ" % pid, "rb") as f:
            return want in b"\0" + f.read()
    except OSError:
        return False


class _Cpu:
    """CPU seconds of this process, its finished children and its live ones with theirs (the
    compiler servers stay up: their time is not in the children's until they end), and of the
    shared compile servers under MKPY_SERVER_DIR (a benchmark gives them a folder of its own, so
    that only its processes use them, one at a time): each daemon's own time (its start, its
    forks) and its servers' with what they reaped (not the daemon's reaped servers: an earlier
    process's server ending meanwhile would bring its whole time). `_Cpu()` marks a start; `.since()`
    is the time since, per process: what a process counted at the mark has added, and all of a
    process started after the mark. getrusage and /proc/PID/schedstat count in microseconds and
    nanoseconds; only a live process's reaped children (the compilers a zygote forked) come in
    clock ticks."""

    def __init__(self):
        self.own, self.procs, self.at = self._now()

    @staticmethod
    def _now():
        import resource
        for _ in range(100):  # a compiler that has exited but is not reaped yet: wait for its reaping
            procs = _cpu_procs()
            if not any(p[4] == "Z" for p in procs.values()):
                break
            time.sleep(0.002)
        with open("/proc/uptime") as f:
            at = float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK")
        own = resource.getrusage(resource.RUSAGE_SELF)
        done = resource.getrusage(resource.RUSAGE_CHILDREN)
        each = {}
        for pid, (ppid, t, reaped, shared, _state, started) in procs.items():
            daemon = shared and not (ppid in procs and procs[ppid][3])
            each[pid] = (started, t + (0.0 if daemon else reaped))
        return own.ru_utime + own.ru_stime + done.ru_utime + done.ru_stime, each, at

    def since(self):
        own, procs, _ = self._now()
        total = own - self.own
        for pid, (started, v) in procs.items():
            before = self.procs.get(pid)
            if before and before[0] == started:
                total += v - before[1]
            elif started >= self.at - 1:  # (start times are in clock ticks)
                total += v
        return total


def _cpu_procs():
    """The processes _Cpu counts (but this one): its children, the shared servers, and their
    children (a compiler a zygote forked: live, its time is its own; a zombie, it is nowhere)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    comm, rest = f.read().rsplit(")", 1)
                stats[int(d)] = (comm, rest.split())
            except (OSError, ValueError):
                continue
    me = os.getpid()
    shared = {pid: _shared_server(pid, comm) for pid, (comm, fields) in stats.items()
              if "clang" in comm or "cbs-pass" in comm}
    counted = {pid: shared.get(pid, False) for pid, (comm, fields) in stats.items()
               if int(fields[1]) == me or shared.get(pid)}
    for pid, (comm, fields) in stats.items():  # their children
        ppid = int(fields[1])
        if pid not in counted and ppid in counted and ppid != me:
            counted[pid] = counted[ppid]
    procs = {}  # pid: (ppid, own seconds, reaped children's seconds, shared, state, start tick)
    for pid, sh in counted.items():
        fields = stats[pid][1]
        try:
            if fields[0] == "Z":
                t = sum(int(v) for v in fields[11:13]) / tick
            else:
                t = 0.0
                for task in os.listdir("/proc/%d/task" % pid):  # its own, in ns, every thread
                    with open("/proc/%d/task/%s/schedstat" % (pid, task)) as f:
                        t += int(f.read().split()[0]) / 1e9
            procs[pid] = (int(fields[1]), t, sum(int(v) for v in fields[13:15]) / tick, sh, fields[0],
                          int(fields[19]))
        except (OSError, ValueError, IndexError):
            continue
    return procs


def kernel_first_eval(name, coop=False):
    import mkpy as mx
    x = mx.arange(256, dtype=mx.float32)
    mx.eval(x)
    k = mx.fast.metal_kernel(name=name, input_names=["inp"], output_names=["out"],
                             source=COOP_KERNEL if coop else SMALL_KERNEL)
    before = mx.metal.kernel_cache_info()
    out, = k(inputs=[x], grid=(256, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(256,)],
             output_dtypes=[mx.float32], **({"template": [("SCALE", 1)]} if coop else {}))
    c0 = _Cpu()
    t0 = time.perf_counter()
    mx.eval(out)
    t = time.perf_counter() - t0
    after = mx.metal.kernel_cache_info()
    return {"seconds": t, "cpu_seconds": c0.since(), "compiles": after["compiles"] - before["compiles"],
            "disk_hits": after["disk_hits"] - before["disk_hits"]}


def sweep(name, n):
    """n variants of the cooperative kernel, each one's first call on a pool of one thread per
    core: the time until the last result is in (the pattern of examples/guide005_autotune_sweep.py)."""
    import concurrent.futures
    import mkpy as mx
    x = mx.arange(256, dtype=mx.float32)
    mx.eval(x)
    k = mx.fast.metal_kernel(name=name, input_names=["inp"], output_names=["out"], source=COOP_KERNEL)
    want = [float(sum(range(64 * g, 64 * g + 64))) for g in range(4)]

    def first(scale):
        out, = k(inputs=[x], template=[("SCALE", scale)], grid=(256, 1, 1), threadgroup=(64, 1, 1),
                 output_shapes=[(256,)], output_dtypes=[mx.float32])
        mx.eval(out)
        got = out.tolist()
        return all(got[64 * g] == want[g] * scale for g in range(4))
    before = mx.metal.kernel_cache_info()
    c0 = _Cpu()
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        ok = all(pool.map(first, range(1, n + 1)))
    t = time.perf_counter() - t0
    after = mx.metal.kernel_cache_info()
    return {"seconds": t, "cpu_seconds": c0.since(), "ok": ok,
            "compiles": after["compiles"] - before["compiles"]}


def pocl_first_run(coop=False):
    import numpy as np
    import pyopencl as cl
    dev = None
    for p in cl.get_platforms():
        if "portable computing language" in p.name.lower():
            dev = p.get_devices()[0]
    ctx = cl.Context(devices=[dev])
    q = cl.CommandQueue(ctx)
    mf = cl.mem_flags
    x = np.arange(256, dtype=np.float32)
    bi = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    bo = cl.Buffer(ctx, mf.WRITE_ONLY, size=x.nbytes)
    # a cold run names a fresh program (MKPY_BENCH_NONCE), so no cache can answer
    src = (COOP_CL if coop else SMALL_CL) + (
        "// %s\n" % os.environ["MKPY_BENCH_NONCE"] if os.environ.get("MKPY_BENCH_NONCE") else "")
    c0 = _Cpu()
    t0 = time.perf_counter()
    prg = cl.Program(ctx, src).build()
    knl = cl.Kernel(prg, "small")
    knl.set_args(bi, bo)
    cl.enqueue_nd_range_kernel(q, knl, (256,), (64,))
    q.finish()
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": c0.since()}


def _rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _maxrss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def _mallinfo():
    """glibc's heap state (bytes): where freed memory stays resident."""
    import ctypes
    fields = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()

    class MI(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in fields]
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MI
        m = libc.mallinfo2()
    except (OSError, AttributeError):
        return None
    return {"heap": m.arena, "mmapped": m.hblkhd, "in_use": m.uordblks, "free_in_heap": m.fordblks}


def import_lib(lib):
    """mkpy, or MLX's CPU build (importable, or from the venv MKPY_BENCH_MLX_VENV names)
    on its CPU device; None for NumPy."""
    if lib == "mkpy":
        import mkpy
        return mkpy
    if lib == "mlx":
        import glob
        venv = os.environ.get("MKPY_BENCH_MLX_VENV")
        if venv:
            sys.path.extend(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")))
        import mlx.core as mlx
        mlx.set_default_device(mlx.cpu)
        return mlx
    return None


def timeit_stmt(lib, spec):
    """Best seconds per call of spec["stmt"] over spec["rounds"] loops of >= 50 ms each,
    in this process alone (no other library loaded, no threads left by one)."""
    import timeit
    import numpy as np
    g = {"np": np, "rng": np.random.default_rng(0), "mx": import_lib(lib)}
    exec(spec.get("setup", ""), g)
    t = timeit.Timer(spec["stmt"], globals=g)
    number, _ = t.autorange()      # calls for >= 0.2 s, also the warm-up
    number = max(1, number // 4)
    return {"seconds": min(t.repeat(repeat=int(spec.get("rounds", 7)), number=number)) / number,
            "number": number}


def chain(lib, variant=0):
    mx = import_lib(lib)
    if mx is not None:  # mkpy or MLX: the same code
        ops = [lambda y: y * 1.0001, lambda y: y + 0.5, mx.tanh, lambda y: y - 0.25]
        # warm the pool, the allocator and the op paths on a small array
        s = mx.arange(1000, dtype=mx.float32)
        for i in range(100 + variant):
            s = ops[i % 4](s)
        mx.eval(s)
        x = mx.random.uniform(shape=(N_CHAIN,))
        mx.eval(x)
    else:
        import numpy as np
        ops = [lambda y: y * np.float32(1.0001), lambda y: y + np.float32(0.5), np.tanh,
               lambda y: y - np.float32(0.25)]
        s = np.arange(1000, dtype=np.float32)
        for i in range(100 + variant):
            s = ops[i % 4](s)
        x = np.random.default_rng(0).random(N_CHAIN, dtype=np.float32)
    base = _maxrss_kib()
    base_now = _rss_kib()
    y = x
    for i in range(100):
        y = ops[i % 4](y)
    if mx is not None:
        mx.eval(y)
    peak = _maxrss_kib()
    res = {"baseline_kib": base, "rss_at_baseline_kib": base_now, "peak_kib": peak,
           "extra_kib": peak - base, "array_kib": N_CHAIN * 4 // 1024}
    res["malloc_after"] = _mallinfo()
    if lib == "mkpy":
        res["mkpy_peak_bytes"] = mx.metal.get_peak_memory()
    return res


def main():
    mode = sys.argv[1]
    if mode == "kernel-first-eval":
        res = kernel_first_eval(sys.argv[2])
    elif mode == "kernel-first-eval-coop":
        res = kernel_first_eval(sys.argv[2], coop=True)
    elif mode == "sweep":
        res = sweep(sys.argv[2], int(sys.argv[3]))
    elif mode == "pocl-first-run":
        res = pocl_first_run(coop=sys.argv[2:] == ["coop"])
    elif mode in ("chain-mkpy", "chain-numpy", "chain-mlx"):
        if not os.environ.get("MKPY_BENCH_CLEAN_RSS"):
            # A process made by fork + exec inherits its parent's RSS high-water mark
            # as ru_maxrss (Linux keeps the old mm's hiwater across exec), and the
            # benchmark parent is large. This process is still small: measure in a
            # child of it.
            import subprocess
            env = dict(os.environ, MKPY_BENCH_CLEAN_RSS="1")
            p = subprocess.run([sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env=env, stdout=subprocess.PIPE,
                               check=True, text=True)
            sys.stdout.write(p.stdout)
            return
        res = chain(mode.split("-")[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    elif mode == "timeit":
        res = timeit_stmt(sys.argv[2], json.loads(sys.stdin.read()))
    else:
        raise SystemExit("unknown mode " + mode)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
