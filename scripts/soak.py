"""A long multi-threaded soak of mkpy (`make soak`; never part of `make test`).

Eight threads mix element-wise ops, reductions and matmuls on fresh data,
evaluate shared lazy graphs, call cached plain and cooperative kernels (one
with threadgroup barriers and simd_sum), and now and then compile a new kernel;
a ninth starts short-lived threads that each run a 1024-thread cooperative
kernel. Every result is checked against NumPy. Every few seconds a line reports
the rounds done, resident memory, the number of mappings, the address space and
mkpy's own active and cached bytes. At the end the memory of the second half is
compared with the first: it should stay flat.

    PYTHONPATH=. python3 scripts/soak.py --seconds 120 [--threads 8] [--every 5]
"""
import argparse
import os
import sys
import tempfile
import threading
import time
import uuid

import numpy as np

os.environ.setdefault("MKPY_CACHE_DIR", tempfile.mkdtemp(prefix="mkpy-soak-cache-"))
import mkpy as mx  # noqa: E402

PLAIN = mx.fast.metal_kernel(name="soak_axpb", input_names=["x"], output_names=["y"], source="""
    uint i = thread_position_in_grid.x;
    y[i] = x[i] * 2.0f + 1.0f;""")

TREE = mx.fast.metal_kernel(name="soak_tree_sum", input_names=["x"], output_names=["y", "z"], source="""
    threadgroup float s[1024];
    uint l = thread_position_in_threadgroup.x, n = threads_per_threadgroup.x;
    float v = x[thread_position_in_grid.x];
    float w = simd_sum(v);
    if (thread_index_in_simdgroup == 0) z[thread_position_in_grid.x / 32] = w;
    s[l] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint h = n / 2; h > 0; h >>= 1) {
        if (l < h) s[l] += s[l + h];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (l == 0) y[threadgroup_position_in_grid.x] = s[0];""")


def tree(x, tg):
    return TREE(inputs=[x], grid=(x.size, 1, 1), threadgroup=(tg, 1, 1),
                output_shapes=[(x.size // tg,), (x.size // 32,)], output_dtypes=[mx.float32, mx.float32])


def memory():
    status = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            status[k] = v.split()
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    return {"rss_mib": int(status["VmRSS"][0]) / 1024, "maps": maps, "vm_mib": int(status["VmSize"][0]) / 1024,
            "active_mib": mx.get_active_memory() / 2**20, "cache_mib": mx.get_cache_memory() / 2**20}


class Soak:
    def __init__(self, seconds, nthreads):
        self.deadline = time.monotonic() + seconds
        self.rounds = [0] * nthreads
        self.short_lived = 0
        self.compiles = 0
        self.errors = []
        rng = np.random.default_rng(0)
        self.shared_np = rng.standard_normal((64, 64)).astype(np.float32)
        self.lazy_ref = None
        self.shared_stream = mx.new_thread_unsafe_stream(mx.gpu)
        self.new_lazy()

    def new_lazy(self):
        # a fresh shared, unevaluated graph that every thread evaluates: on a thread-unsafe stream,
        # as MLX needs (a thread cannot evaluate nodes of another thread's own streams)
        s = mx.array(self.shared_np)
        with mx.stream(self.shared_stream):
            self.lazy = mx.softmax(s @ s.T, axis=-1) * 4
        if self.lazy_ref is None:
            p = self.shared_np @ self.shared_np.T
            e = np.exp(p - p.max(-1, keepdims=True))
            self.lazy_ref = e / e.sum(-1, keepdims=True) * 4

    def worker(self, i):
        r = np.random.default_rng(100 + i)
        n = 0
        while time.monotonic() < self.deadline and not self.errors:
            try:
                self.step(i, n, r)
            except BaseException as e:  # noqa: BLE001 - reported at the end
                self.errors.append((i, repr(e)))
                return
            n += 1
            self.rounds[i] = n

    def step(self, i, n, r):
        kind = (n + i) % 7
        if kind == 0:
            a = r.standard_normal((65, 129)).astype(np.float32)
            got = mx.maximum(mx.array(a) * 3, 0) - mx.mean(mx.array(a), axis=1, keepdims=True)
            np.testing.assert_allclose(np.array(got), np.maximum(a * 3, 0) - a.mean(1, keepdims=True), rtol=1e-5,
                                       atol=1e-5)
        elif kind == 1:
            lazy = self.lazy
            np.testing.assert_allclose(np.array(lazy), self.lazy_ref, rtol=1e-4, atol=1e-5)
            if i == 0:
                self.new_lazy()
        elif kind == 2:
            a = r.standard_normal(4096).astype(np.float32)
            y, = PLAIN(inputs=[mx.array(a)], grid=(4096, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(4096,)],
                       output_dtypes=[mx.float32])
            np.testing.assert_array_equal(np.array(y), a * 2 + 1)
        elif kind == 3:
            a = r.integers(-50, 50, 4096).astype(np.float32)
            tg = 256 if n % 2 else 1024
            y, z = tree(mx.array(a), tg)
            np.testing.assert_array_equal(np.array(y), a.reshape(-1, tg).sum(1))
            np.testing.assert_array_equal(np.array(z), a.reshape(-1, 32).sum(1))
        elif kind == 4:
            a = r.standard_normal((96, 64)).astype(np.float32)
            b = r.standard_normal((64, 80)).astype(np.float32)
            np.testing.assert_allclose(np.array(mx.array(a) @ mx.array(b)), a @ b, rtol=1e-4, atol=1e-4)
        elif kind == 5:
            a = r.standard_normal(1 << 16).astype(np.float32)
            s = mx.sum(mx.exp(mx.array(a) * 0.1)).item()
            assert abs(s - np.exp(a.astype(np.float64) * 0.1).sum()) < 1e-3 * abs(s)
        elif i == 0 and n % 200 == 6:
            # now and then a kernel nobody has compiled
            c = uuid.uuid4().int % 1000
            k = mx.fast.metal_kernel(name="soak_new_%s" % uuid.uuid4().hex[:8], input_names=["x"],
                                     output_names=["y"],
                                     source="uint i = thread_position_in_grid.x; y[i] = x[i] + %d.0f;" % c)
            a = r.standard_normal(128).astype(np.float32)
            y, = k(inputs=[mx.array(a)], grid=(128, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(128,)],
                   output_dtypes=[mx.float32])
            np.testing.assert_array_equal(np.array(y), a + np.float32(c))
            self.compiles += 1

    def spawner(self):
        x = mx.ones(1024)
        mx.eval(x)  # the short-lived threads read it: evaluated here, on its stream's thread

        def call():
            y, z = tree(x, 1024)
            assert y.item() == 1024.0 and (np.array(z) == 32).all()

        while time.monotonic() < self.deadline and not self.errors:
            t = threading.Thread(target=call)
            t.start()
            t.join()
            self.short_lived += 1
            time.sleep(0.01)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--every", type=float, default=5, help="seconds between reports")
    args = ap.parse_args()

    x = mx.array(np.arange(4096, dtype=np.float32))
    mx.eval(PLAIN(inputs=[x], grid=(4096, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(4096,)],
                  output_dtypes=[mx.float32]), *tree(x, 256))  # compile the cached kernels first
    soak = Soak(args.seconds, args.threads)
    threads = [threading.Thread(target=soak.worker, args=(i,)) for i in range(args.threads)]
    threads.append(threading.Thread(target=soak.spawner))
    start = time.monotonic()
    for t in threads:
        t.start()
    samples = []
    print("%7s %9s %7s %8s %7s %9s %10s %9s" % ("time_s", "rounds", "short", "rss_mib", "maps", "vm_mib",
                                                 "active_mib", "cache_mib"), flush=True)
    while any(t.is_alive() for t in threads):
        time.sleep(min(args.every, max(0.1, soak.deadline - time.monotonic())))
        m = memory()
        samples.append(m)
        print("%7.1f %9d %7d %8.1f %7d %9.1f %10.1f %9.1f" % (time.monotonic() - start, sum(soak.rounds),
                                                             soak.short_lived, m["rss_mib"], m["maps"],
                                                             m["vm_mib"], m["active_mib"], m["cache_mib"]),
              flush=True)
    for t in threads:
        t.join()
    if soak.errors:
        print("FAILED:", *soak.errors[:5], sep="\n  ")
        return 1
    half = len(samples) // 2
    if half >= 2:
        first, second = samples[1:half], samples[half:]  # the first sample includes warm-up growth
        if first:
            for key in ("rss_mib", "maps", "vm_mib"):
                a = max(s[key] for s in first)
                b = max(s[key] for s in second)
                print("%-7s first half max %9.1f, second half max %9.1f (%+.1f)" % (key, a, b, b - a))
    print("ok: %d rounds on %d threads, %d short-lived threads, %d new kernels" % (
        sum(soak.rounds), args.threads, soak.short_lived, soak.compiles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
