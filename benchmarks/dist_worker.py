"""One rank of bench_dist.py (started by mpirun, or alone for the 1-rank MLP).

    mpirun -np 2 python benchmarks/dist_worker.py coll RAW_SO   # collectives vs raw MPI from C
    [mpirun -np 2] python benchmarks/dist_worker.py mlp STEPS   # data-parallel MLP steps

Rank 0 prints one JSON line (the last line of its output)."""
import ctypes
import json
import statistics
import sys
import time

import numpy as np

import mkpy as mx

D = mx.distributed


def timed(fn, reps, barrier):
    ts = []
    for _ in range(reps):
        barrier()
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return ts


def coll(raw_so):
    g = D.init(strict=True, backend="mpi")
    raw = ctypes.CDLL(raw_so)
    dptr = ctypes.POINTER(ctypes.c_double)
    barrier = raw.raw_barrier

    def raw_times(fn, a, b, count, reps):
        t = np.zeros(reps)
        fn(ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(b.ctypes.data), ctypes.c_int(count), ctypes.c_int(reps),
           t.ctypes.data_as(dptr))
        return list(t)

    res = {}
    rounds = 3
    # all_sum of 64 MB of float32; raw MPI_Allreduce on the same (evaluated) buffer
    n = 16 * 1024 * 1024
    x = mx.random.uniform(shape=(n,)) + g.rank()
    mx.eval(x)
    xin = np.array(x, copy=False)
    out = np.empty_like(xin)
    assert np.array_equal(np.array(D.all_sum(x)), np.array(D.all_sum(x)))
    mk, rw = [], []
    for _ in range(rounds):
        mk += timed(lambda: mx.eval(D.all_sum(x)), 3, barrier)
        rw += raw_times(raw.raw_allreduce_f32, xin, out, n, 3)
    assert np.array_equal(out, np.array(D.all_sum(x)))  # the same sum, bit for bit
    res["allsum64"] = (statistics.median(mk), statistics.median(rw))
    # 8 bytes
    s = mx.array([1.0, 2.0])
    mx.eval(s)
    sin = np.array(s, copy=False)
    sout = np.empty_like(sin)
    mk, rw = [], []
    for _ in range(rounds):
        mk += timed(lambda: mx.eval(D.all_sum(s)), 300, barrier)
        rw += raw_times(raw.raw_allreduce_f32, sin, sout, 2, 300)
    res["allsum8"] = (statistics.median(mk), statistics.median(rw))
    # all_gather of 16 MB per rank
    m = 16 * 1024 * 1024
    b = mx.random.randint(0, 255, (m,)).astype(mx.uint8)
    mx.eval(b)
    bin_ = np.array(b, copy=False)
    bout = np.empty(m * g.size(), np.uint8)
    mk, rw = [], []
    for _ in range(rounds):
        mk += timed(lambda: mx.eval(D.all_gather(b)), 3, barrier)
        rw += raw_times(raw.raw_allgather_u8, bin_, bout, m, 3)
    assert np.array_equal(bout, np.array(D.all_gather(b)))
    res["allgather16"] = (statistics.median(mk), statistics.median(rw))
    if g.rank() == 0:
        print(json.dumps(res), flush=True)


def mlp(steps):
    g = D.init()
    n = g.size()
    batch, din, dh, dout = 2048, 256, 512, 10
    rng = np.random.default_rng(0)
    X = rng.normal(size=(batch, din)).astype(np.float32)
    Y = rng.normal(size=(batch, dout)).astype(np.float32)
    rows = np.array_split(np.arange(batch), n)[g.rank()]
    x, y = mx.array(X[rows]), mx.array(Y[rows])
    p = {"w1": mx.array(rng.normal(0, 0.05, (din, dh)).astype(np.float32)), "b1": mx.zeros((dh,)),
         "w2": mx.array(rng.normal(0, 0.05, (dh, dh)).astype(np.float32)), "b2": mx.zeros((dh,)),
         "w3": mx.array(rng.normal(0, 0.05, (dh, dout)).astype(np.float32)), "b3": mx.zeros((dout,))}

    def loss(p, x, y):
        h = mx.maximum(x @ p["w1"] + p["b1"], 0)
        h = mx.maximum(h @ p["w2"] + p["b2"], 0)
        return ((h @ p["w3"] + p["b3"] - y) ** 2).sum() / batch

    grad = mx.value_and_grad(loss)

    def step(p):
        l, gr = grad(p, x, y)
        if n > 1:
            gr = {k: D.all_sum(v) for k, v in gr.items()}
        p = {k: p[k] - 0.01 * gr[k] for k in p}
        mx.eval(p)
        return p

    for _ in range(2):
        p = step(p)
    mx.eval(D.all_sum(mx.array(0.0)))
    t, c = time.perf_counter(), time.process_time()
    for _ in range(steps):
        p = step(p)
    cpu = time.process_time() - c
    # the CPU seconds of the busiest rank: what the step costs when every rank has its core
    cpu = D.all_max(mx.array(cpu)).item() if n > 1 else cpu
    secs = time.perf_counter() - t
    if g.rank() == 0:
        print(json.dumps({"samples_per_s": steps * batch / secs, "cpu_samples_per_s": steps * batch / cpu,
                          "ranks": n}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "coll":
        coll(sys.argv[2])
    else:
        mlp(int(sys.argv[2]))
